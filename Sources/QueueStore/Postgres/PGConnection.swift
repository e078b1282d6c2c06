internal import CLibPQ
import Glibc
import Posix

/// A PostgreSQL notification received through LISTEN.
public struct PGNotification: Sendable, Equatable {
    public var channel: String
    public var payload: String
    public var senderPID: Int32

    public init(channel: String, payload: String, senderPID: Int32) {
        self.channel = channel
        self.payload = payload
        self.senderPID = senderPID
    }
}

/// A prepared statement on one connection.
public struct PGStatement: Sendable, Hashable {
    public let name: String
    public let parameterCount: Int
}

/// A blocking connection to PostgreSQL through libpq.
///
/// Ownership rule: a connection is used by one thread or task at a time; it is not
/// `Sendable`, so the compiler keeps it in one isolation region. Every call blocks
/// the calling thread until the server answers. Every session runs with
/// `TimeZone=UTC`, `DateStyle=ISO` and UTF-8 client encoding, which the text
/// decoders rely on.
public final class PGConnection {
    private var handle: OpaquePointer?
    private var statementCounter = 0
    private var statementCache: [String: PGStatement] = [:]
    /// Masks the password in every message this connection makes from a libpq error.
    private let connectionString: PGConnectionString
    /// The session's `application_name`, which names its calls to `PGCallWatch`.
    private let purpose: String
    /// A duplicate of libpq's socket, which `PGCallWatch` may shut down from another thread
    /// to end a call the database does not answer; closed with the connection.
    private var watchSocket: Int32 = -1
    /// Set by `commitWithoutWaiting()`: a COMMIT was sent and its answer is still to be read.
    private var commitPending = false

    /// The libpq version linked into this process, for example 150020 for 15.20.
    public static var libpqVersion: Int { Int(PQlibVersion()) }

    /// Connects from a URL (`postgresql://user:pass@host:port/db?…`) or a keyword string.
    ///
    /// `settings` are run-time parameters sent at start-up (for example
    /// `statement_timeout`), added to the ones pushd always sets.
    /// `defaults` are connection keywords (for example `connect_timeout`) that apply unless
    /// `url` sets the same keyword: libpq lets the expanded `dbname` override the keywords
    /// before it, in both the URL and the keyword form.
    public init(url: String, applicationName: String = "pushd", settings: [String: String] = [:],
                defaults: [String: String] = [:]) throws {
        let connectionString = PGConnectionString(url)
        self.connectionString = connectionString
        purpose = applicationName
        var options = "-c TimeZone=UTC -c DateStyle=ISO"
        for (key, value) in settings.sorted(by: { $0.key < $1.key }) {
            options += " -c \(key)=\(value.replacing(text: " ", with: "\\ "))"
        }
        let sortedDefaults = defaults.sorted { $0.key < $1.key }
        let keys = sortedDefaults.map(\.key) + ["dbname", "application_name", "client_encoding", "options"]
        let values = sortedDefaults.map(\.value) + [url, applicationName, "UTF8", options]
        let call = PGCallWatch.begin(purpose: applicationName, socket: -1)
        let connection: OpaquePointer? = withCStringArray(keys) { keyPointers in
            withCStringArray(values) { valuePointers in
                PQconnectdbParams(keyPointers, valuePointers, 1)
            }
        }
        PGCallWatch.end(call, answered: connection.map { PQstatus($0) == CONNECTION_OK } ?? false)
        guard let connection else {
            throw PGError(code: .connectionFailure, message: "libpq could not allocate a connection")
        }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = connectionString.scrub(Self.trimmed(PQerrorMessage(connection)))
            PQfinish(connection)
            throw PGError(code: .connectionFailure,
                          message: "cannot connect to \(connectionString.redacted): \(message)")
        }
        handle = connection
        watchSocket = dup(PQsocket(connection))
    }

    deinit {
        if let handle { PQfinish(handle) }
        if watchSocket >= 0 { Glibc.close(watchSocket) }
    }

    /// Closes the connection; later calls throw `connectionClosed`.
    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        commitPending = false
        if watchSocket >= 0 { Glibc.close(watchSocket) }
        watchSocket = -1
    }

    /// The value libpq uses for connection keyword `keyword` (for example `keepalives_idle`),
    /// nil when it has none.
    public func connectionOption(_ keyword: String) -> String? {
        guard let handle, let options = PQconninfo(handle) else { return nil }
        defer { PQconninfoFree(options) }
        var option = options
        while let name = option.pointee.keyword {
            if String(cString: name) == keyword { return option.pointee.val.map { String(cString: $0) } }
            option += 1
        }
        return nil
    }

    /// Runs a blocking call registered with `PGCallWatch`.
    private func watched<T>(_ body: () throws -> T) rethrows -> T {
        let call = PGCallWatch.begin(purpose: purpose, socket: watchSocket)
        defer { PGCallWatch.end(call, answered: isOpen) }
        return try body()
    }

    /// True while libpq believes the connection is usable.
    public var isOpen: Bool {
        guard let handle else { return false }
        return PQstatus(handle) == CONNECTION_OK
    }

    /// The server version, for example 150020.
    public var serverVersion: Int {
        guard let handle else { return 0 }
        return Int(PQserverVersion(handle))
    }

    /// The process id of the server backend serving this connection.
    public var backendPID: Int32 {
        guard let handle else { return 0 }
        return PQbackendPID(handle)
    }

    /// The socket, for waiting on notifications with poll or epoll.
    public var socketDescriptor: Int32 {
        guard let handle else { return -1 }
        return PQsocket(handle)
    }

    // MARK: Queries

    /// Runs one statement with text parameters (`$1`, `$2`, …) and returns its rows.
    @discardableResult
    public func query(_ sql: String, _ parameters: [any PGParameter] = []) throws -> PGResult {
        let connection = try openCommitted()
        let result = try watched {
            try withParameters(parameters) { count, values in
                PQexecParams(connection, sql, count, nil, values, nil, nil, 0)
            }
        }
        return try check(result, statement: sql)
    }

    /// Runs one or more statements separated by semicolons without parameters
    /// (for migrations and session set-up). Returns the last statement's result.
    @discardableResult
    public func execute(script sql: String) throws -> PGResult {
        let connection = try openCommitted()
        return try check(watched { PQexec(connection, sql) }, statement: sql)
    }

    /// Prepares a statement once on this connection, to run many times with `query(_:_:)`.
    public func prepare(_ sql: String) throws -> PGStatement {
        let connection = try openCommitted()
        statementCounter += 1
        let name = "pushd_s\(statementCounter)"
        _ = try check(watched { PQprepare(connection, name, sql, 0, nil) }, statement: sql)
        let description = try check(watched { PQdescribePrepared(connection, name) }, statement: sql)
        return PGStatement(name: name, parameterCount: description.parameterCount)
    }

    /// True while a transaction block is open on this connection (also a failed one).
    public var isInTransaction: Bool {
        guard let handle else { return false }
        return PQtransactionStatus(handle) != PQTRANS_IDLE
    }

    /// The statement prepared for `sql` on this connection, prepared on first use.
    /// For the hot statements of long-lived sessions; the cache lives as long as the connection.
    public func prepared(_ sql: String) throws -> PGStatement {
        if let statement = statementCache[sql] { return statement }
        let statement = try prepare(sql)
        statementCache[sql] = statement
        return statement
    }

    /// Runs a prepared statement.
    @discardableResult
    public func query(_ statement: PGStatement, _ parameters: [any PGParameter] = []) throws -> PGResult {
        let connection = try openCommitted()
        let result = try watched {
            try withParameters(parameters) { count, values in
                PQexecPrepared(connection, statement.name, count, values, nil, nil, 0)
            }
        }
        return try check(result, statement: statement.name)
    }

    /// Opens a transaction and runs a prepared statement in it, in one round trip: BEGIN and
    /// the statement go out together (libpq's pipeline mode) and the server answers both,
    /// With `genericPlan` the statement runs on its generic plan (`plan_cache_mode` for it
    /// alone, set and put back in the same round trip): for a statement run thousands of times
    /// a second whose best plan does not depend on its parameters, which PostgreSQL's default
    /// would plan afresh at every run.
    /// The transaction stays open, for the caller to commit or roll back; if the statement
    /// failed it is open and aborted, and only a ROLLBACK ends it.
    @discardableResult
    public func beginAndQuery(_ statement: PGStatement, _ parameters: [any PGParameter] = [],
                              genericPlan: Bool = false) throws -> PGResult {
        try watched { try pipelinedBeginAndQuery(statement, parameters, genericPlan: genericPlan) }
    }

    private func pipelinedBeginAndQuery(_ statement: PGStatement, _ parameters: [any PGParameter],
                                        genericPlan: Bool) throws -> PGResult {
        let connection = try openCommitted()
        guard PQenterPipelineMode(connection) == 1 else {
            throw PGError(code: .connectionFailure, message: "cannot enter pipeline mode: \(errorMessage(connection))",
                          statement: statement.name)
        }
        var before = ["BEGIN"]
        var after: [String] = []
        if genericPlan {
            before.append("SET LOCAL plan_cache_mode = force_generic_plan")
            // DEFAULT: the session's value, which a role's or database's setting may have chosen.
            after.append("SET LOCAL plan_cache_mode TO DEFAULT")
        }
        let sent = try withParameters(parameters) { count, values in
            before.allSatisfy { PQsendQueryParams(connection, $0, 0, nil, nil, nil, nil, 0) == 1 }
                && PQsendQueryPrepared(connection, statement.name, count, values, nil, nil, 0) == 1
                && after.allSatisfy { PQsendQueryParams(connection, $0, 0, nil, nil, nil, nil, 0) == 1 }
                && PQpipelineSync(connection) == 1
        }
        // Every result up to the sync is read, whatever failed, so that the connection can
        // leave pipeline mode: one result per statement, each followed by a NULL, then the sync's.
        let names = before + [statement.name] + after
        var results: [OpaquePointer] = []
        var separators = 0
        while results.count <= names.count {
            guard let result = PQgetResult(connection) else {
                separators += 1
                if separators > names.count || PQstatus(connection) != CONNECTION_OK { break }
                continue
            }
            if PQresultStatus(result) == PGRES_PIPELINE_SYNC {
                PQclear(result)
                break
            }
            results.append(result)
        }
        let left = PQexitPipelineMode(connection) == 1
        guard sent, left, results.count == names.count else {
            let message = errorMessage(connection)
            for result in results { PQclear(result) }
            // A connection stuck in pipeline mode cannot run another statement: close it.
            if !left { close() }
            throw PGError(code: .connectionFailure, message: message.isEmpty ? "the pipelined statement got no answer" : message,
                          statement: statement.name)
        }
        // The first failure is the error (the statements after it were not run); the rest are cleared.
        var answer: PGResult?
        for (index, result) in results.enumerated() {
            do {
                let checked = try check(result, statement: names[index])
                if index == before.count { answer = checked }
            } catch {
                for later in results[(index + 1)...] { PQclear(later) }
                throw error
            }
        }
        guard let answer else {
            throw PGError(code: .connectionFailure, message: "the pipelined statement got no answer", statement: statement.name)
        }
        return answer
    }

    /// Sends COMMIT and returns without waiting for its answer, which the next call on this
    /// connection reads first (and throws if the COMMIT failed): a statement, or the wait for
    /// notifications, which reads it as it arrives. For a transaction that wrote nothing (an
    /// empty claim), whose COMMIT cannot fail but for a lost connection: the caller does not
    /// wait a round trip for it, and the server delivers notifications again as soon as it
    /// has run it.
    public func commitWithoutWaiting() throws {
        let connection = try openCommitted()
        guard PQtransactionStatus(connection) == PQTRANS_INTRANS else {
            throw PGError(code: .noActiveTransaction, message: "commitWithoutWaiting needs an open transaction that has not failed")
        }
        guard PQsendQuery(connection, "COMMIT") == 1 else {
            throw PGError(code: .connectionFailure, message: "sending COMMIT: \(errorMessage(connection))", statement: "COMMIT")
        }
        commitPending = true
    }

    /// True while the answer to `commitWithoutWaiting`'s COMMIT is still to be read.
    public var hasPendingCommit: Bool { commitPending }

    /// Reads the answer to a COMMIT sent by `commitWithoutWaiting`, waiting for it if it has not
    /// arrived (or, with `waiting` false, only as far as it has: the rest is read later); throws
    /// its error.
    private func readPendingCommit(_ connection: OpaquePointer, waiting: Bool = true) throws {
        var failure: Error?
        while commitPending {
            if !waiting, PQisBusy(connection) == 1 { break }
            guard let result = watched({ PQgetResult(connection) }) else {
                commitPending = false
                break
            }
            do { _ = try check(result, statement: "COMMIT") } catch { failure = failure ?? error }
        }
        if let failure { throw failure }
    }

    /// Runs `body` inside BEGIN … COMMIT; rolls back if it throws.
    @discardableResult
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute(script: "BEGIN")
        do {
            let value = try body()
            try execute(script: "COMMIT")
            return value
        } catch {
            if isOpen { _ = try? execute(script: "ROLLBACK") }
            throw error
        }
    }

    // MARK: LISTEN / NOTIFY

    public func listen(_ channel: String) throws {
        try execute(script: "LISTEN \(try quoteIdentifier(channel))")
    }

    public func unlisten(_ channel: String) throws {
        try execute(script: "UNLISTEN \(try quoteIdentifier(channel))")
    }

    public func notify(_ channel: String, payload: String = "") throws {
        try query("SELECT pg_notify($1, $2)", [channel, payload])
    }

    /// Reads what the socket holds without blocking and throws once the server has ended the
    /// session (`pg_terminate_backend`, `idle_in_transaction_session_timeout`, a restart): how a
    /// connection that waits inside an open transaction learns that the transaction is gone. The
    /// server's last message and the closed socket may take two calls to be seen.
    public func checkSession() throws {
        let connection = try open()
        guard PQconsumeInput(connection) == 1, PQstatus(connection) == CONNECTION_OK else {
            // libpq's text goes on over indented lines guessing at the cause; its first line says it.
            let said = errorMessage(connection).split(separator: "\n").first.map(String.init) ?? "closed"
            throw PGError(code: .connectionFailure, message: "the session ended: \(said)")
        }
    }

    /// Reads what the socket holds without blocking and returns the notifications queued so far.
    public func pendingNotifications() throws -> [PGNotification] {
        let connection = try open()
        guard PQconsumeInput(connection) == 1 else {
            throw PGError(code: .connectionFailure, message: "reading notifications: \(errorMessage(connection))")
        }
        // The answer to a COMMIT sent without waiting, as far as it has arrived.
        try readPendingCommit(connection, waiting: false)
        return drainNotifications(connection)
    }

    /// Waits up to `timeoutMilliseconds` for at least one notification (−1 waits forever).
    /// Returns an empty array on time-out.
    public func waitForNotifications(timeoutMilliseconds: Int32) throws -> [PGNotification] {
        let connection = try open()
        let queued = drainNotifications(connection)
        if !queued.isEmpty { return queued }
        var deadline = Self.monotonicMilliseconds() + Int64(timeoutMilliseconds)
        if timeoutMilliseconds < 0 { deadline = .max }
        while true {
            let remaining = deadline == .max ? -1 : Int32(clamping: max(0, deadline - Self.monotonicMilliseconds()))
            var descriptor = pollfd(fd: PQsocket(connection), events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, remaining)
            if ready < 0 {
                if errno == EINTR { continue }
                throw PGError(code: .connectionFailure, message: "poll on the database socket failed: errno \(errno)")
            }
            let notifications = try pendingNotifications()
            if !notifications.isEmpty { return notifications }
            if ready == 0 || (remaining == 0) { return [] }
            if PQstatus(connection) != CONNECTION_OK {
                throw PGError(code: .connectionFailure, message: "the database connection was lost while listening")
            }
        }
    }

    private func drainNotifications(_ connection: OpaquePointer) -> [PGNotification] {
        var out = [PGNotification]()
        while let notification = PQnotifies(connection) {
            let value = notification.pointee
            out.append(PGNotification(channel: String(cString: value.relname),
                                      payload: String(cString: value.extra),
                                      senderPID: value.be_pid))
            PQfreemem(notification)
        }
        return out
    }

    // MARK: COPY FROM STDIN

    /// Runs `COPY … FROM STDIN` and lets `body` write rows; returns the number of rows copied.
    /// If `body` throws, the COPY is aborted and nothing is written.
    @discardableResult
    public func copyIn(_ sql: String, _ body: (inout PGCopyWriter) throws -> Void) throws -> Int {
        try watched { try copyInUnwatched(sql, body) }
    }

    private func copyInUnwatched(_ sql: String, _ body: (inout PGCopyWriter) throws -> Void) throws -> Int {
        let connection = try openCommitted()
        let start = PQexec(connection, sql)
        guard let start, PQresultStatus(start) == PGRES_COPY_IN else {
            _ = try check(start, statement: sql)
            throw PGError(code: .clientEncoding, message: "statement did not start a COPY FROM STDIN", statement: String(sql.prefix(200)))
        }
        PQclear(start)
        var writer = PGCopyWriter(connection: connection)
        var failure: (any Error)?
        do {
            try body(&writer)
            try writer.flush()
        } catch {
            failure = error
        }
        let endStatus: Int32
        if let failure {
            endStatus = PQputCopyEnd(connection, "aborted by client: \(failure)")
        } else {
            endStatus = PQputCopyEnd(connection, nil)
        }
        var copied = 0
        var serverError: (any Error)?
        while let result = PQgetResult(connection) {
            do {
                let checked = try check(result, statement: sql)
                copied = checked.affectedRows
            } catch {
                serverError = serverError ?? error
            }
        }
        if let failure { throw failure }
        if let serverError { throw serverError }
        guard endStatus == 1 else {
            throw PGError(code: .connectionFailure, message: "ending COPY failed: \(errorMessage(connection))")
        }
        return copied
    }

    // MARK: Helpers

    /// Quotes an identifier (channel, table name) with libpq's own escaping.
    public func quoteIdentifier(_ identifier: String) throws -> String {
        let connection = try open()
        guard let escaped = PQescapeIdentifier(connection, identifier, identifier.utf8.count) else {
            throw PGError(code: .clientEncoding, message: "cannot quote identifier: \(errorMessage(connection))")
        }
        defer { PQfreemem(escaped) }
        return String(cString: escaped)
    }

    private func open() throws -> OpaquePointer {
        guard let handle else {
            throw PGError(code: .connectionClosed, message: "the database connection was closed")
        }
        return handle
    }

    /// `open()` for a statement: first reads the answer to a COMMIT sent without waiting.
    private func openCommitted() throws -> OpaquePointer {
        let connection = try open()
        try readPendingCommit(connection)
        return connection
    }

    private func check(_ result: OpaquePointer?, statement: String) throws -> PGResult {
        guard let result else {
            let message = handle.map { errorMessage($0) } ?? "no connection"
            throw PGError(code: .connectionFailure, message: message, statement: String(statement.prefix(200)))
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return PGResult(taking: result)
        default:
            var error = Self.error(from: result, connection: handle, statement: statement)
            error.message = connectionString.scrub(error.message)
            PQclear(result)
            throw error
        }
    }

    static func error(from result: OpaquePointer, connection: OpaquePointer?, statement: String) -> PGError {
        func field(_ pointer: UnsafeMutablePointer<CChar>?) -> String? { pointer.map { String(cString: $0) } }
        let sqlstate = field(pushd_pq_result_sqlstate(result))
        var message = field(pushd_pq_result_primary(result)) ?? trimmed(PQresultErrorMessage(result))
        if message.isEmpty, let connection { message = trimmed(PQerrorMessage(connection)) }
        return PGError(code: sqlstate.map(PGError.Code.init) ?? .connectionFailure,
                       message: message,
                       detail: field(pushd_pq_result_detail(result)),
                       hint: field(pushd_pq_result_hint(result)),
                       constraint: field(pushd_pq_result_constraint(result)),
                       table: field(pushd_pq_result_table(result)),
                       column: field(pushd_pq_result_column(result)),
                       statement: String(statement.prefix(200)))
    }

    static func trimmed(_ pointer: UnsafePointer<CChar>?) -> String {
        guard let pointer else { return "" }
        var text = String(cString: pointer)
        while text.last?.isWhitespace == true { text.removeLast() }
        return text
    }

    static func trimmed(_ pointer: UnsafeMutablePointer<CChar>?) -> String {
        trimmed(UnsafePointer(pointer))
    }

    /// The connection string (URL or keyword form) with every password masked, for error messages and logs.
    public static func redacted(_ url: String) -> String {
        PGConnectionString(url).redacted
    }

    /// libpq's last error on this connection, without the password.
    private func errorMessage(_ connection: OpaquePointer) -> String {
        connectionString.scrub(Self.trimmed(PQerrorMessage(connection)))
    }

    static func monotonicMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    /// Lays all parameters out in one buffer of NUL-terminated strings and passes
    /// libpq an array of pointers into it (nil for SQL NULL).
    private func withParameters<T>(_ parameters: [any PGParameter],
                                   _ body: (Int32, UnsafePointer<UnsafePointer<CChar>?>?) -> T) throws -> T {
        if parameters.isEmpty { return body(0, nil) }
        var storage = [CChar]()
        var offsets = [Int]()
        offsets.reserveCapacity(parameters.count)
        for (index, parameter) in parameters.enumerated() {
            guard let text = parameter.pgText else {
                offsets.append(-1)
                continue
            }
            offsets.append(storage.count)
            for byte in text.utf8 {
                guard byte != 0 else {
                    throw PGError(code: .clientEncoding, message: "parameter $\(index + 1) contains a NUL byte, which PostgreSQL text cannot hold")
                }
                storage.append(CChar(bitPattern: byte))
            }
            storage.append(0)
        }
        return storage.withUnsafeBufferPointer { buffer in
            let pointers: [UnsafePointer<CChar>?] = offsets.map { $0 < 0 ? nil : buffer.baseAddress! + $0 }
            return pointers.withUnsafeBufferPointer { body(Int32(parameters.count), $0.baseAddress) }
        }
    }
}

private func withCStringArray<T>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> T) -> T {
    let duplicated: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) } + [nil]
    defer { duplicated.forEach { free($0) } }
    let constant = duplicated.map { UnsafePointer($0) }
    return constant.withUnsafeBufferPointer { body($0.baseAddress!) }
}

/// Writes rows in COPY's text format, buffering to about 256 KiB per `PQputCopyData`.
public struct PGCopyWriter: ~Copyable {
    private let connection: OpaquePointer
    private var buffer: [UInt8] = []
    public private(set) var rowCount = 0

    init(connection: OpaquePointer) {
        self.connection = connection
        buffer.reserveCapacity(1 << 18)
    }

    /// Appends one row; `nil` fields are SQL NULL. Tabs, newlines and backslashes are escaped.
    public mutating func writeRow(_ fields: [String?]) throws {
        for (index, field) in fields.enumerated() {
            if index > 0 { buffer.append(9) }
            guard let field else {
                buffer.append(UInt8(ascii: "\\"))
                buffer.append(UInt8(ascii: "N"))
                continue
            }
            appendEscaped(field)
        }
        buffer.append(10)
        rowCount += 1
        if buffer.count >= 1 << 18 { try flush() }
    }

    /// Appends bytes that are already in COPY text format, one or more whole lines.
    public mutating func writeRaw(_ bytes: some Sequence<UInt8>) throws {
        buffer.append(contentsOf: bytes)
        if buffer.count >= 1 << 18 { try flush() }
    }

    private mutating func appendEscaped(_ field: String) {
        for byte in field.utf8 {
            switch byte {
            case UInt8(ascii: "\\"): buffer.append(UInt8(ascii: "\\")); buffer.append(UInt8(ascii: "\\"))
            case 9: buffer.append(UInt8(ascii: "\\")); buffer.append(UInt8(ascii: "t"))
            case 10: buffer.append(UInt8(ascii: "\\")); buffer.append(UInt8(ascii: "n"))
            case 13: buffer.append(UInt8(ascii: "\\")); buffer.append(UInt8(ascii: "r"))
            default: buffer.append(byte)
            }
        }
    }

    mutating func flush() throws {
        guard !buffer.isEmpty else { return }
        let status = buffer.withUnsafeBufferPointer { pointer in
            pointer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: pointer.count) {
                PQputCopyData(connection, $0, Int32(pointer.count))
            }
        }
        guard status == 1 else {
            throw PGError(code: .connectionFailure, message: "sending COPY data failed: \(PGConnection.trimmed(PQerrorMessage(connection)))")
        }
        buffer.removeAll(keepingCapacity: true)
    }
}
