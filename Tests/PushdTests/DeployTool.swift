import Foundation
import PushdTestSupport

/// The operations tools the deploy files are written for (promtool, systemd-analyze,
/// Python's YAML loader), run as the test's subprocesses. They come from Debian packages
/// that scripts/install-deps.sh installs: prometheus, systemd, python3-yaml.
enum DeployTool {
    /// The repository's root, from this file's path.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func path(_ relative: String) -> String { root.appendingPathComponent(relative).path }

    struct Result {
        var status: Int32
        var output: String
        var errors: String
    }

    /// Runs `executable` with `arguments` in `directory` and collects what it printed.
    static func run(_ executable: String, _ arguments: [String], in directory: String? = nil) throws -> Result {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        // Standard error goes to a file, so a chatty tool cannot block on a full pipe
        // while standard output is read.
        let errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("pushd-tool-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: errorFile) }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = try FileHandle(forWritingTo: errorFile)
        try process.run()
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let errorData = (try? Data(contentsOf: errorFile)) ?? Data()
        return Result(status: process.terminationStatus,
                      output: String(decoding: outputData, as: UTF8.self),
                      errors: String(decoding: errorData, as: UTF8.self))
    }

    /// Every document of a YAML file as Foundation values (dictionaries, arrays, strings,
    /// numbers, booleans), loaded by PyYAML's safe loader and handed over as JSON.
    static func yamlDocuments(_ relative: String) throws -> [Any] {
        let script = "import json, sys, yaml; json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)"
        let result = try run("/usr/bin/python3", ["-c", script, path(relative)])
        guard result.status == 0 else {
            throw ToolFailure("python3 could not load \(relative) as YAML: \(result.errors)")
        }
        guard let documents = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [Any] else {
            throw ToolFailure("\(relative) did not load as a list of documents")
        }
        return documents
    }

    struct ToolFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
