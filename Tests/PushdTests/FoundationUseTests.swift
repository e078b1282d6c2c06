import Foundation
import Testing

/// No target under Sources imports Foundation or FoundationEssentials: the standard library,
/// Glibc, Sources/Posix (dates, ids, files) and the APNs module's JSON carry what pushd and
/// apns-mock need. One `import Foundation` anywhere in the daemon makes every `pushd run` map
/// libFoundation and ICU, about 6 MB of resident memory it never uses (Benchmarks/README.md,
/// Memory of the daemon), and FoundationEssentials alone about 2 MB (docs/dispatcher-measurements.md).
/// The tests keep Foundation.
@Suite struct FoundationUseTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func noSourceImportsFoundationOrItsInternationalizationModules() throws {
        // `import Foundation`, `@preconcurrency import Foundation`, `import struct Foundation.Date`,
        // FoundationEssentials, and the modules that bring ICU or libcurl's Foundation wrapper in.
        let use = try Regex(#"^\s*(@\w+\s+)*((public|package|internal|fileprivate|private)\s+)?import\s+((struct|class|enum|protocol|typealias|func|var|let)\s+)?(Foundation|FoundationEssentials|FoundationInternationalization|FoundationNetworking|FoundationXML)\b"#)
        var found: [String] = []
        var scanned = 0
        let files = FileManager.default.enumerator(at: Self.root.appendingPathComponent("Sources"), includingPropertiesForKeys: nil)
        while let file = files?.nextObject() as? URL {
            guard file.pathExtension == "swift" else { continue }
            scanned += 1
            let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            for (index, line) in lines.enumerated() where line.contains(use) {
                found.append("Sources/\(file.path.components(separatedBy: "/Sources/").last ?? file.path):\(index + 1)")
            }
        }
        #expect(scanned > 100, "found only \(scanned) Swift files under \(Self.root.path)/Sources")
        #expect(found.isEmpty, "use the standard library, Glibc or Sources/Posix instead of Foundation: \(found.joined(separator: ", "))")
    }
}
