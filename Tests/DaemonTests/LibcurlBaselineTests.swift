import Foundation
import PushdTestSupport
import Testing
@testable import pushd

/// libcurl 8 is the baseline: `pushd version` says what pushd runs on, and `pushd run` warns
/// at start on an older libcurl.
@Suite struct LibcurlBaselineTests {
    @Test func versionPrintsLibcurlWithItsTLSLibraryAndNghttp2() throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: DaemonProcessTests.binary)
        process.arguments = ["version"]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let curl = try #require(text.split(separator: "\n").first { $0.hasPrefix("libcurl ") }, "\(text)")
        // For example "libcurl 8.14.1 (OpenSSL/3.0.17, nghttp2 1.52.0, HTTP/2 yes)".
        #expect(curl.firstMatch(of: /^libcurl 8\.\d+\.\d+ \(OpenSSL\/\d+\.\d+\.\d+[^,]*, nghttp2 \d+\.\d+\.\d+, HTTP\/2 yes\)$/) != nil,
                "\(curl)")
        #expect(text.contains("\nOpenSSL "), "\(text)")
        #expect(!text.contains("warning:"), "this machine links libcurl 8: \(text)")
    }

    @Test func libcurl7IsWarnedAboutWithTheReason() throws {
        let warning = try #require(VersionCommand.libcurlBaselineWarning(version: "7.88.1"))
        #expect(warning.hasPrefix("libcurl 7.88.1 is older than 8"))
        #expect(warning.contains("RST_STREAM after nearly every answered stream"))
        #expect(VersionCommand.libcurlBaselineWarning(version: "7.99.0") != nil)
    }

    @Test func libcurl8AndLaterAreNotWarnedAbout() {
        #expect(VersionCommand.libcurlBaselineWarning(version: "8.0.0") == nil)
        #expect(VersionCommand.libcurlBaselineWarning(version: "8.14.1") == nil)
        #expect(VersionCommand.libcurlBaselineWarning(version: "10.2.0") == nil)
    }

    @Test func anUnreadableVersionIsWarnedAboutRatherThanTrusted() throws {
        let warning = try #require(VersionCommand.libcurlBaselineWarning(version: "unknown"))
        #expect(warning.contains("'unknown'"))
    }
}
