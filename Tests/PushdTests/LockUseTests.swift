import Foundation
import Testing

/// Shared state sits in `Locking.Lock`, not `Synchronization.Mutex`: on Linux
/// ThreadSanitizer does not see the futex a contended `Mutex` waits on, reports every access
/// made under it as a race, and so `make sanitize-thread`, which CI runs, fails
/// (docs/security.md, "Sanitizers"). This says so in the normal suite, where it is cheap.
@Suite struct LockUseTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func noSourceOrTestKeepsStateInSynchronizationMutex() throws {
        let use = try Regex(#"\bMutex\s*[<(]"#)
        var found: [String] = []
        for folder in ["Sources", "Tests"] {
            let files = FileManager.default.enumerator(at: Self.root.appendingPathComponent(folder), includingPropertiesForKeys: nil)
            while let file = files?.nextObject() as? URL {
                guard file.pathExtension == "swift", file.lastPathComponent != "LockUseTests.swift" else { continue }
                let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
                for (index, line) in lines.enumerated() where line.contains(use) {
                    found.append("\(folder)/\(file.path.components(separatedBy: "/\(folder)/").last ?? file.path):\(index + 1)")
                }
            }
        }
        #expect(found.isEmpty, "keep shared state in Lock (Sources/Locking), not Mutex: \(found.joined(separator: ", "))")
    }
}
