import Foundation
import Locking
import Posix
import Testing
@testable import pushd

/// The small replacements for Foundation API that pushd uses (Sources/Posix, Locking's
/// Condition, the CLI's column layout) give what Foundation gave.
@Suite struct PosixHelpersTests {
    @Test func fixedPrintsLikeStringFormat() {
        for value in [0, 0.05, 0.15, 0.25, 1.25, 2.5, 99.95, -3.14159, 1_234_567.891, 1e20, 1e300] {
            for places in 0...2 {
                #expect(value.fixed(places) == String(format: "%.\(places)f", value), "\(value) with \(places) places")
                #expect(value.fixed(places, width: 7) == String(format: "%7.\(places)f", value), "\(value) in 7 characters")
            }
        }
    }

    @Test func zeroPaddedPrintsLikePercentZeroD() {
        for value in [-5, -42, 0, 7, 42, 123] {
            #expect(value.zeroPadded(2) == String(format: "%02d", value))
        }
    }

    @Test func paddedCutsOrFillsLikeNSStringPadding() {
        for (text, width) in [("abc", 5), ("abcdef", 3), ("", 2), ("abc", 3)] {
            #expect(text.padded(to: width) == text.padding(toLength: width, withPad: " ", startingAt: 0))
        }
        #expect("  a b  ".trimmingSpaces() == "a b")
        #expect("   ".trimmingSpaces() == "")
    }

    @Test func conditionWaitGivesUpAfterItsTimeout() {
        let condition = Condition(0)
        let start = Timestamp()
        let result: Int? = condition.wait(timeout: 0.05) { $0 > 0 ? $0 : nil }
        #expect(result == nil)
        #expect(Timestamp().timeIntervalSince(start) >= 0.045)
    }

    @Test func conditionUpdateWakesAWaiterOnAnotherThread() {
        let condition = Condition(0)
        PosixThread.detach(name: "test-updater") {
            PosixThread.sleep(seconds: 0.02)
            condition.update { $0 = 7 }
        }
        let result: Int? = condition.wait(timeout: 10) { $0 > 0 ? $0 : nil }
        #expect(result == 7)
    }
    @Test func timestampParsesISO8601LikeFoundation() throws {
        let foundation = ISO8601DateFormatter()
        foundation.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let plain = ISO8601DateFormatter()
        for text in ["2026-12-01T09:00:00Z", "2026-12-01T09:00:00+01:00", "2026-12-01T09:00:00-05:30", "1970-01-01T00:00:00Z",
                     "2099-01-02T03:04:05Z", "2024-02-29T23:59:59Z", "2026-12-01T09:00:00.250Z", "2026-12-01T09:00:00.5+02:00"] {
            let expected = try #require(foundation.date(from: text) ?? plain.date(from: text), "\(text)")
            let parsed = try #require(Timestamp(iso8601: text), "\(text)")
            #expect(abs(parsed.timeIntervalSince1970 - expected.timeIntervalSince1970) < 0.001, "\(text)")
        }
        for text in ["", "2026-12-01", "2026-12-01T09:00:00", "2026-02-30T09:00:00Z", "2026-13-01T09:00:00Z", "2026-12-01T24:00:00Z",
                     "2026-12-01T09:00:00Zjunk", "2026-12-01 T09:00:00Z", "2026-12-01T09:00:00.Z"] {
            #expect(Timestamp(iso8601: text) == nil, "\(text)")
        }
    }

    @Test func timestampParsesPostgreSQLOutputToTheMicrosecond() throws {
        func parse(_ text: String) -> Timestamp? {
            var text = text
            return text.withUTF8 { Timestamp(parsing: $0, as: .postgres) }
        }
        let cases: [(String, Double)] = [
            ("2026-12-01 09:00:00+00", 1_796_115_600), ("2026-12-01 09:00:00.000250+00", 1_796_115_600.000250),
            ("2026-12-01 10:30:00+01:30", 1_796_115_600), ("2026-12-01 09:00:00", 1_796_115_600),
            ("1901-12-13 20:45:52+00:19:32", -2_147_484_820), ("2024-02-29 23:59:59.5-05", 1_709_269_199.5),
        ]
        for (text, seconds) in cases {
            let parsed = try #require(parse(text), "\(text)")
            #expect(abs(parsed.timeIntervalSince1970 - seconds) < 0.000_001, "\(text)")
        }
        for text in ["2026-12-01T09:00:00Z", "2026-12-01 09:00:00Z", "2026-02-30 09:00:00+00", "2026-12-01 09:00:00.+00", "2026-12-01 09:00"] {
            #expect(parse(text) == nil, "\(text)")
        }
    }

    @Test func timestampPrintsISO8601LikeFoundation() {
        let formatter = ISO8601DateFormatter()
        for seconds in [0, 1_700_000_000.9, 4_102_444_800, 951_782_400, -86_400] as [Double] {
            let moment = Timestamp(timeIntervalSince1970: seconds)
            let date = Date(timeIntervalSince1970: seconds)
            #expect(moment.iso8601 == formatter.string(from: date), "\(seconds)")
            #expect(moment.iso8601(separator: " ") == formatter.string(from: date).replacingOccurrences(of: "T", with: " "))
            #expect(moment.iso8601Day == String(formatter.string(from: date).prefix(10)))
        }
        let now = Timestamp()
        #expect(abs(now.timeIntervalSince1970 - Date().timeIntervalSince1970) < 1)
    }

    @Test func fileSystemWritesReadsListsAndRemovesATree() throws {
        let directory = FileSystem.temporaryDirectory + "/pushd-fs-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileSystem.createDirectory(directory + "/a/b")
        try FileSystem.write("héllo\n", to: directory + "/a/b/file.txt", permissions: 0o600)
        #expect(try FileSystem.readText(directory + "/a/b/file.txt") == "héllo\n")
        #expect(FileManager.default.contents(atPath: directory + "/a/b/file.txt") == Data("héllo\n".utf8))
        let status = try #require(FileSystem.status(directory + "/a/b/file.txt"))
        #expect(status.isRegularFile && !status.isDirectory && status.size == 7 && status.permissions == 0o600)
        #expect(FileSystem.status(directory + "/a")?.isDirectory == true)
        #expect(try FileSystem.contentsOfDirectory(directory + "/a") == ["b"])
        #expect(throws: SystemCallError.self) { try FileSystem.read(directory + "/missing") }
        #expect(ErrorReason.of(SystemCallError("open", path: "x", code: ENOENT)) == "No such file or directory")
        try FileSystem.remove(directory)
        #expect(!FileSystem.exists(directory))
        try FileSystem.remove(directory)
    }

    /// `readdir` returns records as long as their names, and the last one of its buffer can
    /// end where the mapping ends: here a record of a 2-byte name placed at the end of a page
    /// whose next page may not be read. A copy of the whole `dirent` (280 bytes) read into that
    /// page and crashed the process (SIGSEGV), as a scrape's count of /proc/self/fd once did.
    @Test func aDirectoryEntryIsReadOnlyAsFarAsItsName() throws {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let mapping = try #require(mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        #expect(mapping != MAP_FAILED)
        defer { munmap(mapping, 2 * page) }
        #expect(mprotect(mapping + page, page, PROT_NONE) == 0)
        let nameOffset = try #require(MemoryLayout<dirent>.offset(of: \dirent.d_name))
        let recordLength = (nameOffset + 3 + 7) & ~7
        let record = mapping + page - recordLength
        record.storeBytes(of: UInt16(recordLength), toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_reclen)!, as: UInt16.self)
        for (index, byte) in "ab\0".utf8.enumerated() { record.storeBytes(of: byte, toByteOffset: nameOffset + index, as: UInt8.self) }
        #expect(FileSystem.entryName(record.assumingMemoryBound(to: dirent.self)) == "ab")

        // And a real directory's entries come out whole.
        let directory = NSTemporaryDirectory() + "pushd-dirent-\(getpid())"
        try FileSystem.createDirectory(directory)
        defer { try? FileSystem.remove(directory) }
        let names = ["a", String(repeating: "n", count: 200), "fd-17"]
        for name in names { try FileSystem.write("x", to: directory + "/" + name) }
        #expect(Set(try FileSystem.contentsOfDirectory(directory)) == Set(names))
    }

    @Test func environmentListsTheProcessVariables() {
        #expect(Environment.variables == ProcessInfo.processInfo.environment)
    }
}
