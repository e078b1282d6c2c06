import Foundation
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
}
