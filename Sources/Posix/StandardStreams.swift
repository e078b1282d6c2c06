import Glibc

/// Standard output, error and input as bytes, unbuffered: a line written here is in the
/// pipe when the call returns, which scripts and tests waiting for it rely on.
public enum StandardStreams {
    public static func writeOutput(_ text: String) { write(text, to: STDOUT_FILENO) }

    public static func writeError(_ text: String) { write(text, to: STDERR_FILENO) }

    /// Everything on standard input up to its end. A read error ends it early, as the end
    /// of a pipe would; the caller validates what it got (a payload, a token list).
    public static func readInput() -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(STDIN_FILENO, $0.baseAddress, $0.count) }
            if count > 0 {
                bytes.append(contentsOf: chunk[..<count])
            } else if count == 0 || errno != EINTR {
                return bytes
            }
        }
    }

    private static func write(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written > 0 {
                    offset += written
                } else if written == 0 || errno != EINTR {
                    return
                }
            }
        }
    }
}
