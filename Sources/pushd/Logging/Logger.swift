import Posix
import Glibc
import Locking

/// A field value in a log line: text, number or boolean, rendered as JSON.
enum LogValue: Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByStringInterpolation {
    case string(String)
    case int(Int64)
    case double(Double)
    case bool(Bool)

    init(stringLiteral value: String) { self = .string(value) }
    init(integerLiteral value: Int64) { self = .int(value) }
    init(booleanLiteral value: Bool) { self = .bool(value) }
}

/// Where log lines go. The standard handler writes JSON lines; tests use `MemoryLogSink`.
protocol LogSink: Sendable {
    func write(_ line: String)
    /// Reopens the destination (after log rotation, on SIGHUP).
    func reopen()
}

/// JSON lines on stderr, or in a file that SIGHUP reopens.
final class FileLogSink: LogSink, @unchecked Sendable {
    // The descriptor is replaced only under the mutex; each line is one write(2),
    // so lines from several threads never interleave.
    private let path: String?
    private let descriptor: Lock<Int32>

    init(path: String?) {
        self.path = path
        descriptor = Lock(path.map { Self.open($0) } ?? 2)
    }

    private static func open(_ path: String) -> Int32 {
        let fd = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o640)
        return fd >= 0 ? fd : 2
    }

    func write(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(10)
        descriptor.withLock { fd in
            bytes.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let written = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                    if written < 0 { if errno == EINTR { continue }; return }
                    offset += written
                }
            }
        }
    }

    func reopen() {
        guard let path else { return }
        descriptor.withLock { fd in
            let fresh = Self.open(path)
            if fd != 2 { close(fd) }
            fd = fresh
        }
    }
}

/// Keeps lines in memory, for tests.
final class MemoryLogSink: LogSink {
    private let storage = Lock<[String]>([])
    var lines: [String] { storage.withLock { $0 } }
    func write(_ line: String) { storage.withLock { $0.append(line) } }
    func reopen() {}
}

/// A tiny structured logger. Messages are autoclosures, so a disabled level costs
/// only a comparison. Never pass a key, a JWT or a whole device token: use
/// `Logger.redactToken` for tokens.
struct Logger: Sendable {
    var level: PushdConfig.LogLevel
    var sink: any LogSink
    var baseFields: [(String, LogValue)] = []

    init(level: PushdConfig.LogLevel, sink: any LogSink) {
        self.level = level
        self.sink = sink
    }

    func with(_ fields: (String, LogValue)...) -> Logger {
        var copy = self
        copy.baseFields += fields
        return copy
    }

    func debug(_ message: @autoclosure () -> String, _ fields: (String, LogValue)...) { log(.debug, message, fields) }
    func info(_ message: @autoclosure () -> String, _ fields: (String, LogValue)...) { log(.info, message, fields) }
    func notice(_ message: @autoclosure () -> String, _ fields: (String, LogValue)...) { log(.notice, message, fields) }
    func warning(_ message: @autoclosure () -> String, _ fields: (String, LogValue)...) { log(.warning, message, fields) }
    func error(_ message: @autoclosure () -> String, _ fields: (String, LogValue)...) { log(.error, message, fields) }

    /// A line whose fields are assembled at run time.
    func write(_ lineLevel: PushdConfig.LogLevel, _ message: @autoclosure () -> String, fields: [(String, LogValue)]) {
        log(lineLevel, message, fields)
    }

    /// Whether lines of `lineLevel` are written: lets callers skip assembling debug detail.
    func enabled(_ lineLevel: PushdConfig.LogLevel) -> Bool { lineLevel >= level }

    private func log(_ lineLevel: PushdConfig.LogLevel, _ message: () -> String, _ fields: [(String, LogValue)]) {
        guard lineLevel >= level else { return }
        var line = "{\"time\":\"\(Self.timestamp())\",\"level\":\"\(lineLevel.rawValue)\",\"msg\":"
        Self.appendJSONString(message(), to: &line)
        for (key, value) in baseFields + fields {
            line += ","
            Self.appendJSONString(key, to: &line)
            line += ":"
            switch value {
            case .string(let text): Self.appendJSONString(text, to: &line)
            case .int(let number): line += String(number)
            case .double(let number): line += number.isFinite ? String(number) : "null"
            case .bool(let flag): line += flag ? "true" : "false"
            }
        }
        line += "}"
        sink.write(line)
    }

    /// The first 8 characters of a device token: enough to correlate, not enough to push.
    static func redactToken(_ token: String) -> String {
        token.count <= 8 ? token : String(token.prefix(8)) + "…"
    }

    static func timestamp(_ date: Timestamp = Timestamp()) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        let millis = Int((date.timeIntervalSince1970 - Double(seconds)) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int = 2) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1))-\(pad(parts.tm_mday))T"
            + "\(pad(parts.tm_hour)):\(pad(parts.tm_min)):\(pad(parts.tm_sec)).\(pad(Int32(millis), 3))Z"
    }

    static func appendJSONString(_ text: String, to out: inout String) {
        out += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}
