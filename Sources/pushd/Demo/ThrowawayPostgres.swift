import Posix
import Spawn
import Glibc

/// A PostgreSQL server of its own in a temporary folder, on a free port of 127.0.0.1,
/// with trust authentication for user `pushd` and a database `pushd`. It runs as the
/// `postgres` user when started by root (PostgreSQL refuses to run as root), and
/// `stop()` shuts it down and deletes the folder.
final class ThrowawayPostgres {
    let url: String
    private let directory: String
    private let binaries: String
    private let runAs: [String]
    private var running = true

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    init() throws {
        let versions = (try? FileSystem.contentsOfDirectory("/usr/lib/postgresql")) ?? []
        guard let newest = versions.compactMap(Int.init).max() else {
            throw Failure(description: "no PostgreSQL server under /usr/lib/postgresql: install the postgresql package (make demo does)")
        }
        binaries = "/usr/lib/postgresql/\(newest)/bin"
        directory = FileSystem.temporaryDirectory + "/pushd-demo-pg-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileSystem.createDirectory(directory)
        if getuid() == 0 {
            guard let owner = getpwnam("postgres") else {
                throw Failure(description: "running as root needs the 'postgres' user to run PostgreSQL as")
            }
            chown(directory, owner.pointee.pw_uid, owner.pointee.pw_gid)
            runAs = ["/usr/sbin/runuser", "-u", "postgres", "--"]
        } else {
            runAs = []
        }
        let port = try Self.freePort()
        url = "postgresql://pushd@127.0.0.1:\(port)/pushd"
        do {
            try run(runAs + ["\(binaries)/initdb", "-D", "\(directory)/data", "-U", "pushd", "--auth=trust", "-E", "UTF8", "--no-locale"])
            let settings = """

            listen_addresses = '127.0.0.1'
            port = \(port)
            unix_socket_directories = '\(directory)'
            max_connections = 100
            shared_buffers = 256MB
            max_wal_size = 4GB
            """
            let configuration = "\(directory)/data/postgresql.conf"
            try FileSystem.write(FileSystem.readText(configuration) + settings, to: configuration)
            try run(runAs + ["\(binaries)/pg_ctl", "-D", "\(directory)/data", "-l", "\(directory)/server.log", "-w", "-t", "60", "start"])
            try run(["/usr/bin/psql", "-X", "-q", "-h", "127.0.0.1", "-p", "\(port)", "-U", "pushd", "-d", "postgres",
                     "-c", "CREATE DATABASE pushd"])
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    func stop() {
        guard running else { return }
        running = false
        if FileSystem.exists("\(directory)/data/postmaster.pid") {
            try? run(runAs + ["\(binaries)/pg_ctl", "-D", "\(directory)/data", "-m", "immediate", "-w", "stop"])
        }
        try? FileSystem.remove(directory)
    }

    private func run(_ command: [String]) throws {
        // Output goes to a file: the server started by pg_ctl outlives the command.
        try Subprocess.run(command, outputPath: directory + "/command.out")
    }

    /// A port nobody listens on now: bind port 0 on loopback and read what the kernel chose.
    static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw Failure(description: "socket() failed: errno \(errno)") }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic -> Int32 in
                guard bind(descriptor, generic, length) == 0 else { return -1 }
                return getsockname(descriptor, generic, &length)
            }
        }
        guard bound == 0 else { throw Failure(description: "could not find a free port: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
