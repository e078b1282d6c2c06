import Foundation
import Testing

/// The modules `pushd run` links wait on `Locking.Semaphore` and `Condition`, not on the Swift
/// Dispatch overlay: its library loads `_StringProcessing` and `_RegexParser` with it, 1.2 MB of
/// the daemon's resident memory (docs/queue.md, Memory of a campaign drain). The compiler
/// catches a use of `_StringProcessing` itself (Package.swift `withoutStringProcessing`); this
/// catches the import that would bring it back. apns-mock, its own process, keeps Dispatch.
@Suite struct DispatchUseTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let daemonModules = ["APNs", "APNsMock", "Dispatcher", "Locking", "Metrics", "Polling", "Posix", "QueueStore", "pushd"]

    @Test func noModuleOfTheDaemonImportsDispatch() throws {
        let use = try Regex(#"^\s*(@\w+\s+)*((public|package|internal|fileprivate|private)\s+)?import\s+((struct|class|enum|protocol|typealias|func|var|let)\s+)?Dispatch\b"#)
        var found: [String] = []
        var scanned = 0
        for module in Self.daemonModules {
            let files = FileManager.default.enumerator(at: Self.root.appendingPathComponent("Sources/\(module)"), includingPropertiesForKeys: nil)
            while let file = files?.nextObject() as? URL {
                guard file.pathExtension == "swift" else { continue }
                scanned += 1
                let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
                for (index, line) in lines.enumerated() where line.contains(use) {
                    found.append("Sources/\(module)/\(file.path.components(separatedBy: "/Sources/\(module)/").last ?? file.path):\(index + 1)")
                }
            }
        }
        #expect(scanned > 100, "found only \(scanned) Swift files under \(Self.root.path)/Sources")
        #expect(found.isEmpty, "wait on Locking.Semaphore or Condition instead of Dispatch: \(found.joined(separator: ", "))")
    }
}
