import Foundation
import Glibc
import PushdTestSupport
import Testing
@testable import pushd

/// The database password never leaves the process: the real `pushd` binary is pointed at a
/// database that refuses connections, with the password in each form libpq accepts, and
/// every byte it writes (stdout, stderr, the JSON log, `/readyz`, `/metrics`) is searched.
@Suite(.serialized) struct SecretRedactionTests {
    struct Form: CustomStringConvertible {
        var description: String
        var url: String
        var secret: String
    }

    /// Port 1 on loopback: nothing listens there, so every connection is refused at once.
    static let forms: [Form] = [
        Form(description: "URL userinfo", url: "postgresql://pushd:Userinfo-S3cret@127.0.0.1:1/pushd", secret: "Userinfo-S3cret"),
        Form(description: "URL ?password=", url: "postgresql://pushd@127.0.0.1:1/pushd?password=Query-S3cret&connect_timeout=3",
             secret: "Query-S3cret"),
        Form(description: "URL &sslpassword=", url: "postgres://pushd@127.0.0.1:1/pushd?sslmode=disable&sslpassword=Ssl-S3cret",
             secret: "Ssl-S3cret"),
        Form(description: "URL percent-encoded parameter name", url: "postgresql://127.0.0.1:1/pushd?user=pushd&pass%77ord=Encoded-S3cret",
             secret: "Encoded-S3cret"),
        Form(description: "keywords, plain value", url: "host=127.0.0.1 port=1 user=pushd password=Keyword-S3cret dbname=pushd",
             secret: "Keyword-S3cret"),
        Form(description: "keywords, quoted value with spaces", url: "host=127.0.0.1 port=1 password = 'Quoted S3cret \\' here' dbname=pushd",
             secret: "Quoted S3cret"),
        Form(description: "keywords, sslpassword", url: "host=127.0.0.1 port=1 user=pushd sslpassword=KeySsl-S3cret dbname=pushd",
             secret: "KeySsl-S3cret"),
    ]

    struct Output {
        var status: Int32
        var text: String
    }

    /// Runs `pushd arguments…` to its end; stdout and stderr together.
    static func pushd(_ arguments: [String], environment: [String: String]) throws -> Output {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: DaemonProcessTests.binary)
        process.arguments = arguments
        process.environment = environment
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Output(status: process.terminationStatus, text: String(decoding: data, as: UTF8.self))
    }

    static func environment(databaseURL: String) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["PUSHD_DATABASE_URL"] = databaseURL
        environment["PGCONNECT_TIMEOUT"] = "3"
        return environment
    }

    static func http(_ port: String, _ path: String) throws -> String {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        process.arguments = ["-s", "-S", "-i", "--max-time", "5", "http://127.0.0.1:\(port)\(path)"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    @Test(arguments: forms)
    func commandsNeverPrintTheDatabasePassword(_ form: Form) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let config = try harness.writeConfigFile()
            let environment = Self.environment(databaseURL: form.url)
            let commands: [[String]] = [
                ["check-config", "--config", config],
                ["migrate", "--config", config],
                ["migrate", "--database-url", form.url],
                ["campaign", "status", "1", "--config", config],
                ["campaign", "list", "--database-url", form.url],
                ["tokens", "prune-stats", "--config", config],
            ]
            for command in commands {
                let output = try Self.pushd(command, environment: environment)
                // Each of them must have failed on the database, or it proves nothing.
                #expect(output.status != 0, "\(command): \(output.text)")
                #expect(output.text.contains("127.0.0.1") || output.text.contains("database"), "\(command): \(output.text)")
                #expect(!output.text.contains(form.secret), "\(form) leaks through `pushd \(command.joined(separator: " "))`: \(output.text)")
            }
        }
    }

    @Test(arguments: forms)
    func runNeverPutsTheDatabasePasswordInTheLogReadyzOrMetrics(_ form: Form) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let config = try harness.writeConfigFile()
            let log = harness.directory + "/run.log"
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: DaemonProcessTests.binary)
            process.arguments = ["run", "--config", config]
            process.environment = Self.environment(databaseURL: form.url)
            _ = FileManager.default.createFile(atPath: log, contents: nil)
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
            process.standardOutput = handle
            process.standardError = handle
            try process.run()
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

            func logText() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
            // The start-up line names the port chosen for metrics; then wait for two failed attempts.
            #expect(DaemonHarness.wait(seconds: 20) { logText().components(separatedBy: "database unreachable").count >= 3 },
                    "\(logText())")
            let port = try #require(logText().firstMatch(of: /"metrics":"127\.0\.0\.1:(\d+)"/)?.1, "\(logText())")
            let readyz = try Self.http(String(port), "/readyz")
            let metrics = try Self.http(String(port), "/metrics")
            kill(process.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(process, seconds: 10))

            #expect(readyz.contains("503"), "\(readyz)")
            #expect(readyz.contains("not ready: database unreachable"), "\(readyz)")
            #expect(!readyz.contains("127.0.0.1:1") && !readyz.contains("port=1"), "/readyz shows the connection string: \(readyz)")
            #expect(metrics.contains("pushd_"), "\(metrics)")
            for (name, text) in [("log", logText()), ("/readyz", readyz), ("/metrics", metrics)] {
                #expect(!text.contains(form.secret), "\(form) leaks into \(name): \(text)")
            }
        }
    }

    /// libpq reads a passfile itself; pushd never opens it, so its contents cannot reach a message.
    @Test func passfileContentsNeverReachAMessage() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let config = try harness.writeConfigFile()
            let passfile = harness.directory + "/pgpass"
            try "127.0.0.1:1:*:pushd:Passfile-S3cret\n".write(toFile: passfile, atomically: true, encoding: .utf8)
            chmod(passfile, 0o600)
            let url = "host=127.0.0.1 port=1 user=pushd passfile=\(passfile) dbname=pushd"
            for command in [["check-config", "--config", config], ["migrate", "--database-url", url]] {
                let output = try Self.pushd(command, environment: Self.environment(databaseURL: url))
                #expect(output.status != 0, "\(output.text)")
                #expect(!output.text.contains("Passfile-S3cret"), "\(output.text)")
            }
        }
    }
}
