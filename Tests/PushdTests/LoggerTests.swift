import Foundation
import Testing
@testable import pushd

@Suite struct LoggerTests {
    @Test func writesOneJSONObjectPerLineWithFields() throws {
        let sink = MemoryLogSink()
        let logger = Logger(level: .info, sink: sink).with(("app", "shop"))
        logger.info("sent \"quoted\"\nline", ("count", 3), ("ok", true))
        let line = try #require(sink.lines.first)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["level"] as? String == "info")
        #expect(object["msg"] as? String == "sent \"quoted\"\nline")
        #expect(object["app"] as? String == "shop")
        #expect(object["count"] as? Int == 3)
        #expect(object["ok"] as? Bool == true)
        #expect((object["time"] as? String)?.hasSuffix("Z") == true)
    }

    @Test func disabledLevelsDoNotEvaluateTheMessage() {
        let sink = MemoryLogSink()
        let logger = Logger(level: .warning, sink: sink)
        var evaluated = false
        logger.debug({ evaluated = true; return "expensive" }())
        #expect(!evaluated)
        #expect(sink.lines.isEmpty)
        logger.error("shown")
        #expect(sink.lines.count == 1)
    }

    @Test func controlCharactersAreEscaped() {
        var out = ""
        Logger.appendJSONString("a\u{1}b\tc", to: &out)
        #expect(out == "\"a\\u0001b\\tc\"")
    }

    @Test func tokensAreCutToAPrefix() {
        let token = String(repeating: "ab", count: 32)
        #expect(Logger.redactToken(token) == "abababab…")
    }

    @Test func fileSinkReopensAfterRotation() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pushd-log-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("pushd.log").path
        let sink = FileLogSink(path: path)
        sink.write("first")
        try FileManager.default.moveItem(atPath: path, toPath: path + ".1")
        sink.reopen()
        sink.write("second")
        #expect(try String(contentsOfFile: path + ".1", encoding: .utf8) == "first\n")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "second\n")
    }
}
