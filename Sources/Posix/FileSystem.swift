import Glibc

/// Files and directories through the C library, in place of Foundation's `FileManager`
/// (which would map FoundationEssentials into the daemon). Failures carry `errno`.
public enum FileSystem {
    /// What `stat` says about a path (following symbolic links).
    public struct Status: Sendable {
        public let isDirectory: Bool
        public let isRegularFile: Bool
        public let size: Int
        /// The permission bits (`st_mode & 0o7777`).
        public let permissions: Int
    }

    /// nil when the path does not exist or cannot be reached.
    public static func status(_ path: String) -> Status? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let type = info.st_mode & S_IFMT
        return Status(isDirectory: type == S_IFDIR, isRegularFile: type == S_IFREG,
                      size: Int(info.st_size), permissions: Int(info.st_mode & 0o7777))
    }

    public static func exists(_ path: String) -> Bool { status(path) != nil }

    /// The whole file.
    public static func read(_ path: String) throws(SystemCallError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw SystemCallError("open", path: path) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw SystemCallError("read", path: path)
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[0..<count])
        }
    }

    /// The whole file as UTF-8 text (invalid sequences become U+FFFD).
    public static func readText(_ path: String) throws(SystemCallError) -> String {
        String(decoding: try read(path), as: UTF8.self)
    }

    /// Replaces the file's contents: written to a sibling and renamed over it, so that a
    /// reader sees the old file or the new one, never half of it.
    public static func write(_ bytes: some Collection<UInt8>, to path: String, permissions: mode_t = 0o644) throws(SystemCallError) {
        let temporary = "\(path).tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, permissions)
        guard fd >= 0 else { throw SystemCallError("open", path: temporary) }
        let data = Array(bytes)
        var written = 0
        while written < data.count {
            let count = data.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 {
                if errno == EINTR { continue }
                let failure = SystemCallError("write", path: temporary)
                close(fd)
                unlink(temporary)
                throw failure
            }
            written += count
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let failure = SystemCallError("rename", path: path)
            unlink(temporary)
            throw failure
        }
    }

    public static func write(_ text: String, to path: String, permissions: mode_t = 0o644) throws(SystemCallError) {
        try write(text.utf8, to: path, permissions: permissions)
    }

    /// `mkdir -p`.
    public static func createDirectory(_ path: String, permissions: mode_t = 0o755) throws(SystemCallError) {
        if status(path)?.isDirectory == true { return }
        var prefix = path.hasPrefix("/") ? "/" : ""
        for component in path.split(separator: "/") {
            prefix += component
            if mkdir(prefix, permissions) != 0, errno != EEXIST { throw SystemCallError("mkdir", path: prefix) }
            prefix += "/"
        }
        guard status(path)?.isDirectory == true else { throw SystemCallError("mkdir", path: path, code: ENOTDIR) }
    }

    /// The names in a directory, without "." and "..", in no particular order.
    public static func contentsOfDirectory(_ path: String) throws(SystemCallError) -> [String] {
        guard let directory = opendir(path) else { throw SystemCallError("opendir", path: path) }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = entryName(entry)
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// The name of a directory entry `readdir` returned, read where it lies. The record is
    /// only as long as its name (`d_reclen`), not `MemoryLayout<dirent>.size`: a copy of the
    /// whole struct (`entry.pointee`) reads up to 256 bytes past a short name, and for the
    /// last record of the stream's buffer that can be an unmapped page. A scrape's count of
    /// `/proc/self/fd` crashed a process so (SIGSEGV in memcpy, at a page boundary).
    public static func entryName(_ entry: UnsafePointer<dirent>) -> String {
        let offset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        return String(cString: (UnsafeRawPointer(entry) + offset).assumingMemoryBound(to: CChar.self))
    }

    /// `rm -rf`: removes a file or a directory tree; a path that does not exist is no error.
    public static func remove(_ path: String) throws(SystemCallError) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT { return }
            throw SystemCallError("lstat", path: path)
        }
        if info.st_mode & S_IFMT == S_IFDIR {
            for name in try contentsOfDirectory(path) { try remove(path + "/" + name) }
            guard rmdir(path) == 0 else { throw SystemCallError("rmdir", path: path) }
        } else {
            guard unlink(path) == 0 || errno == ENOENT else { throw SystemCallError("unlink", path: path) }
        }
    }

    /// `$TMPDIR`, or /tmp.
    public static var temporaryDirectory: String {
        if let value = getenv("TMPDIR"), value.pointee != 0 {
            let text = String(cString: value)
            return text.hasSuffix("/") && text.count > 1 ? String(text.dropLast()) : text
        }
        return "/tmp"
    }
}

/// The process's environment variables, in place of Foundation's `ProcessInfo`.
public enum Environment {
    public static var variables: [String: String] {
        var result: [String: String] = [:]
        var cursor = environ
        while let entry = cursor.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            cursor += 1
        }
        return result
    }
}
