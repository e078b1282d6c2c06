import Foundation
import PushdTestSupport
import Posix
import Glibc

/// An HTTP/2 client that writes frames by hand through `openssl s_client`, for what no
/// ordinary client does on purpose: resetting streams after (or right after) their answers,
/// the way libcurl 7.88 did and the way a rapid-reset attack does.
final class RawH2Client {
    private let process = ChildProcess()
    private let input = Pipe()
    private let output = Pipe()
    private let received = ReceivedBytes()

    init(port: UInt16) throws {
        let files = try TestCertificates.files()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = ["s_client", "-connect", "127.0.0.1:\(port)", "-alpn", "h2", "-quiet",
                             "-CAfile", files.caCertificate, "-verify_return_error", "-servername", "localhost"]
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        let received = self.received
        output.fileHandleForReading.readabilityHandler = { handle in received.append(handle.availableData) }
        try process.run()
        // Writes must not block the test when a server that ended the connection has
        // stopped reading and s_client, blocked in turn, stops reading its input.
        let writeFD = input.fileHandleForWriting.fileDescriptor
        _ = fcntl(writeFD, F_SETFL, fcntl(writeFD, F_GETFL) | O_NONBLOCK)
        // The client preface and an empty SETTINGS frame.
        write(Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + Self.frame(type: 0x4, flags: 0, stream: 0, payload: []))
    }

    deinit { close() }

    func close() {
        output.fileHandleForReading.readabilityHandler = nil
        try? input.fileHandleForWriting.close()
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// `GET /` on `stream` (odd, increasing), ending the stream: an answer comes back at once
    /// (405 MethodNotAllowed), which is all these tests need.
    @discardableResult
    func sendRequest(stream: UInt32) -> Bool {
        // HPACK: :method GET, :path /, :scheme https (static indexes 2, 4, 7), :authority
        // as a literal with the static name index 1.
        let authority = Array("localhost".utf8)
        let block: [UInt8] = [0x82, 0x84, 0x87, 0x01, UInt8(authority.count)] + authority
        return write(Self.frame(type: 0x1, flags: 0x5, stream: stream, payload: block))
    }

    /// RST_STREAM with STREAM_CLOSED (0x5), the code libcurl 7.88 sent after answers.
    @discardableResult
    func sendReset(stream: UInt32) -> Bool {
        write(Self.frame(type: 0x3, flags: 0, stream: stream, payload: [0, 0, 0, 0x5]))
    }

    /// Whether a frame of `type` from the server has arrived (on `stream`, when given), within `seconds`.
    func waitForFrame(type: UInt8, stream: UInt32? = nil, endingStream: Bool = false, seconds: Double = 10) -> Bool {
        let deadline = Timestamp().addingTimeInterval(seconds)
        while Timestamp() < deadline {
            if hasFrame(type: type, stream: stream, endingStream: endingStream) { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return hasFrame(type: type, stream: stream, endingStream: endingStream)
    }

    /// The payloads of the server's frames of `type`, as far as complete frames go.
    func payloads(ofType type: UInt8) -> [[UInt8]] {
        let bytes = received.bytes
        var result: [[UInt8]] = []
        var offset = 0
        while offset + 9 <= bytes.count {
            let length = Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
            guard offset + 9 + length <= bytes.count else { break }
            if bytes[offset + 3] == type { result.append(Array(bytes[(offset + 9)..<(offset + 9 + length)])) }
            offset += 9 + length
        }
        return result
    }

    /// The streams of the server's frames of `type`, in the order they arrived.
    func streams(ofType type: UInt8) -> [UInt32] {
        Self.frames(in: received.bytes).filter { $0.type == type }.map(\.stream)
    }

    private func hasFrame(type: UInt8, stream: UInt32?, endingStream: Bool) -> Bool {
        Self.frames(in: received.bytes).contains { frame in
            frame.type == type && (stream == nil || frame.stream == stream)
                && (!endingStream || frame.flags & 0x1 != 0)
        }
    }

    /// Gives up after two seconds of a full pipe; returns whether every byte went out.
    @discardableResult
    private func write(_ bytes: [UInt8]) -> Bool {
        let fd = input.fileHandleForWriting.fileDescriptor
        let deadline = Timestamp().addingTimeInterval(2)
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + sent, $0.count - sent) }
            if count > 0 {
                sent += count
            } else if count < 0 && (errno == EAGAIN || errno == EINTR) && Timestamp() < deadline {
                usleep(1000)
            } else {
                return false
            }
        }
        return true
    }

    static func frame(type: UInt8, flags: UInt8, stream: UInt32, payload: [UInt8]) -> [UInt8] {
        let length = payload.count
        return [UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF), type, flags,
                UInt8(stream >> 24 & 0x7F), UInt8(stream >> 16 & 0xFF), UInt8(stream >> 8 & 0xFF), UInt8(stream & 0xFF)]
            + payload
    }

    /// Frame headers of a server's byte stream, as far as complete frames go.
    static func frames(in bytes: [UInt8]) -> [(type: UInt8, flags: UInt8, stream: UInt32)] {
        var result: [(UInt8, UInt8, UInt32)] = []
        var offset = 0
        while offset + 9 <= bytes.count {
            let length = Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
            guard offset + 9 + length <= bytes.count else { break }
            let stream = UInt32(bytes[offset + 5] & 0x7F) << 24 | UInt32(bytes[offset + 6]) << 16
                | UInt32(bytes[offset + 7]) << 8 | UInt32(bytes[offset + 8])
            result.append((bytes[offset + 3], bytes[offset + 4], stream))
            offset += 9 + length
        }
        return result
    }
}

/// Bytes from the server, appended on a pipe's reader thread and read by the test.
private final class ReceivedBytes: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [UInt8] = []

    func append(_ data: Data) { lock.withLock { storage.append(contentsOf: data) } }
    var bytes: [UInt8] { lock.withLock { storage } }
}
