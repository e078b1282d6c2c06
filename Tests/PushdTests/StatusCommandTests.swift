import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd status` through the command-line parser, against a real database.
@Suite struct StatusCommandTests {
    @Test func anEmptyFleetPrintsEachSectionAndExitsOne() throws {
        try IsolatedDatabase.with { database in
            let run = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            #expect(run.exitCode == 1)
            let text = run.output.text
            #expect(text.hasPrefix("pushd status at "))
            #expect(text.contains(": DEGRADED\n  problem: no live pushd instance: nothing is being sent"))
            for heading in ["Instances: 0 alive, 0 gone", "Queue", "Campaigns", "Dead letters in the last hour", "Paused apps"] {
                #expect(text.contains("\n\(heading)\n"), "\(heading) missing in:\n\(text)")
            }
        }
    }

    @Test func aDatabaseWithoutTheRegistryAsksForMigrate() throws {
        try IsolatedDatabase.with(migrated: false) { database in
            let run = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            #expect(run.exitCode == 1)
            #expect(run.output.errorText.contains("run `pushd migrate`"), "\(run.output.errorText)")
        }
    }

    @Test func anIntervalOutsideItsRangeIsRefusedWithTheOptionNamed() throws {
        let run = try CommandRun(["status", "--watch", "--interval", "0", "--database-url", "postgresql://nobody@127.0.0.1:1/none"], StatusCommand.run)
        #expect(run.exitCode == 1)
        #expect(run.output.errorText.contains("--interval '0' must be a whole number from 1 to 3600"))
    }

    /// `--watch --json` is for scripts: one JSON document per line, one line per sample.
    @Test func watchWithJSONWritesOneDocumentPerLine() throws {
        try IsolatedDatabase.with { database in
            let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("pushd").path
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = ["status", "--watch", "--json", "--interval", "1", "--database-url", database.url]
            process.environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            // Ends the command if it has not written two lines by then, so the read below
            // cannot hang. Two samples take about two seconds; unflushed, a pipe's 4 KB
            // buffer would hold them back for over ten.
            // SIGKILL: the test process may hand its children a mask that blocks SIGTERM.
            let pid = process.processIdentifier
            let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
            DispatchQueue.global().asyncAfter(deadline: .now() + 8, execute: watchdog)
            defer { watchdog.cancel() }
            var received = Data()
            while received.filter({ $0 == UInt8(ascii: "\n") }).count < 2 {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                received.append(chunk)
            }
            kill(pid, SIGKILL)
            process.waitUntilExit()
            let lines = String(decoding: received, as: UTF8.self).split(separator: "\n")
            #expect(lines.count >= 2)
            for line in lines.prefix(2) {
                let document = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                #expect(document?["healthy"] as? Bool == false)
                #expect(document?["problems"] as? [String] == ["no live pushd instance: nothing is being sent"])
            }
        }
    }
}
