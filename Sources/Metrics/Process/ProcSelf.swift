import Posix
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What /proc says about this process, read at scrape time.
struct ProcSelf {
    struct ReadError: Error, CustomStringConvertible {
        let path: String
        let detail: String
        var description: String { "\(path): \(detail)" }
    }

    /// Fields of /proc/self/stat that the process metrics use, already in base units.
    struct Stat {
        var cpuSeconds: Double
        var startTimeSeconds: Double
        var virtualMemoryBytes: Double
        var residentMemoryBytes: Double
    }

    static func stat() throws -> Stat {
        let text = try readFile("/proc/self/stat")
        // The command name in parentheses may contain spaces; the fields after it do not.
        guard let close = text.lastIndex(of: ")") else {
            throw ReadError(path: "/proc/self/stat", detail: "no closing parenthesis after the command name")
        }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // fields[0] is field 3 of proc(5): state.
        func field(_ number: Int) throws -> Double {
            let index = number - 3
            guard index < fields.count, let value = Double(fields[index]) else {
                throw ReadError(path: "/proc/self/stat", detail: "field \(number) missing or not a number")
            }
            return value
        }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let pageSize = Double(sysconf(Int32(_SC_PAGESIZE)))
        return Stat(
            cpuSeconds: (try field(14) + field(15)) / ticks,
            startTimeSeconds: try bootTime() + field(22) / ticks,
            virtualMemoryBytes: try field(23),
            residentMemoryBytes: try field(24) * pageSize)
    }

    /// Seconds since the epoch at which the machine booted (`btime` in /proc/stat).
    static func bootTime() throws -> Double {
        let text = try readFile("/proc/stat")
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            if let value = Double(line.dropFirst("btime ".count)) { return value }
        }
        throw ReadError(path: "/proc/stat", detail: "no btime line")
    }

    static func openFileDescriptors() throws -> Double {
        let count: Int
        do {
            count = try FileSystem.contentsOfDirectory("/proc/self/fd").count
        } catch {
            throw ReadError(path: "/proc/self/fd", detail: "\(error)")
        }
        // The directory stream itself holds one descriptor while we count.
        return Double(max(count - 1, 0))
    }

    static func maxFileDescriptors() throws -> Double {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw ReadError(path: "getrlimit(RLIMIT_NOFILE)", detail: String(cString: strerror(errno)))
        }
        return limit.rlim_cur == rlim_t.max ? .infinity : Double(limit.rlim_cur)
    }

    /// Reads a whole /proc file; their size is reported as 0, so read until end of file.
    static func readFile(_ path: String) throws -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw ReadError(path: path, detail: String(cString: strerror(errno))) }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw ReadError(path: path, detail: String(cString: strerror(errno)))
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
