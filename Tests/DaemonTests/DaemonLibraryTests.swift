import Foundation
import Glibc
import PushdTestSupport
import Testing

/// What a running `pushd run` maps: no Foundation library at all and not ICU. The daemon's
/// dates, ids, files and JSON come from Sources/Posix and the APNs module; libFoundation,
/// FoundationInternationalization and ICU would cost about 6 MB of resident memory, and
/// FoundationEssentials alone about 2 MB (Benchmarks/README.md, Memory of the daemon;
/// docs/dispatcher-measurements.md). FoundationUseTests guards the sources; this guards the process,
/// whatever links them in.
@Suite(.serialized) struct DaemonLibraryTests {
    @Test func aSendingDaemonMapsNoFoundationLibraryAndNoICU() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            _ = try CampaignLaneTests.campaign(connection, count: 2_000, rate: 2000)
            let config = try harness.writeConfigFile()
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                if !DaemonProcessTests.waitForExit(process, seconds: 15) { kill(process.processIdentifier, SIGKILL) }
            }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 100 })

            // /proc files report a size of 0: read to the end rather than by size.
            let file = try #require(FileHandle(forReadingAtPath: "/proc/\(process.processIdentifier)/maps"))
            let maps = String(decoding: file.readDataToEndOfFile(), as: UTF8.self)
            file.closeFile()
            let libraries = Set(maps.split(separator: "\n").compactMap { line in
                line.split(separator: " ", omittingEmptySubsequences: true).dropFirst(5).first.map { String($0) }
            }.filter { $0.hasPrefix("/") })
            // The read saw the process's libraries: libcurl sends.
            #expect(libraries.contains { $0.contains("libcurl") }, "\(libraries.sorted())")
            let unwanted = libraries.filter { path in
                let name = (path as NSString).lastPathComponent
                // libFoundation.so, libFoundationEssentials.so, libFoundationInternationalization.so, …
                return name.hasPrefix("libFoundation") || name.hasPrefix("lib_FoundationICU") || name.hasPrefix("libicu")
            }
            #expect(unwanted.isEmpty, "pushd run maps \(unwanted.sorted())")
        }
    }
}
