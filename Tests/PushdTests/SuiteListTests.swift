import Foundation
import Testing

/// The suite runs two tests at a time, but the suites listed in scripts/suites-run-alone.txt
/// (scripts/test.sh). A name there that is no suite would leave the suite it meant beside
/// others; a suite with an async test left off the list could wait for Swift's cooperative
/// threads behind two synchronous tests.
@Suite struct SuiteListTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The names the list gives, in order.
    static func listed() throws -> [String] {
        let text = try String(contentsOf: root.appendingPathComponent("scripts/suites-run-alone.txt"), encoding: .utf8)
        return text.split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.allSatisfy(\.isWhitespace) }
            .compactMap { $0.split(separator: " ").first.map(String.init) }
    }

    /// Each test file's suites, and whether it has an async test.
    static func testFiles() throws -> [(path: String, suites: [String], async: Bool)] {
        let suite = try Regex(#"@Suite\b[^\n]*?(?:\n\s*)?(?:final class|struct|enum|class)\s+(\w+)"#)
        let asyncTest = try Regex(#"@Test\b[^{]*\)\s+async\b"#)
        var files: [(String, [String], Bool)] = []
        let enumerator = FileManager.default.enumerator(at: root.appendingPathComponent("Tests"), includingPropertiesForKeys: nil)
        while let file = enumerator?.nextObject() as? URL {
            guard file.pathExtension == "swift" else { continue }
            let text = try String(contentsOf: file, encoding: .utf8)
            let names = text.matches(of: suite).compactMap { $0.output[1].substring.map(String.init) }
            files.append((file.path.components(separatedBy: "/Tests/").last ?? file.path, names, text.contains(asyncTest)))
        }
        return files
    }

    @Test func everyNameListedIsASuiteOnce() throws {
        let listed = try Self.listed()
        let suites = Set(try Self.testFiles().flatMap(\.suites))
        #expect(listed.count > 10)
        #expect(listed.filter { !suites.contains($0) } == [], "scripts/suites-run-alone.txt names no such suite")
        #expect(Set(listed).count == listed.count, "a suite is listed twice")
    }

    @Test func everySuiteWithAnAsyncTestRunsAlone() throws {
        let listed = Set(try Self.listed())
        let missing = try Self.testFiles().filter(\.async).flatMap { file in file.suites.filter { !listed.contains($0) }.map { "\($0) (\(file.path))" } }
        #expect(missing == [], "add to scripts/suites-run-alone.txt")
    }
}
