import Glibc
import PushdTestSupport
import QueueStore
import Testing

/// Every session pushd opens bounds its wait on a server that vanished: TCP keepalives and
/// `tcp_user_timeout` on its socket, unless the database URL sets them itself (in either
/// form). Read back from the socket, which is what the kernel acts on.
@Suite struct DeadPeerSettingsTests {
    static func option(_ connection: PGConnection, _ level: Int32, _ name: Int32) -> Int32 {
        var value: Int32 = -1
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(connection.socketDescriptor, level, name, &value, &length) == 0 else { return -1 }
        return value
    }

    static let tcp = Int32(IPPROTO_TCP)
    // From <netinet/tcp.h>.
    static let keepIdle: Int32 = 4, keepInterval: Int32 = 5, keepCount: Int32 = 6, userTimeout: Int32 = 18

    /// (SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT) of the session's socket.
    static func socketSettings(_ connection: PGConnection) -> [Int32] {
        [option(connection, SOL_SOCKET, SO_KEEPALIVE), option(connection, tcp, keepIdle), option(connection, tcp, keepInterval),
         option(connection, tcp, keepCount), option(connection, tcp, userTimeout)]
    }

    @Test func aSessionFindsADeadPeerWithinThirtySecondsByDefault() throws {
        let connection = try QueueSession.connect(url: try TestDatabase.url(), applicationName: "pushd-tests")
        defer { connection.close() }
        let settings = Self.socketSettings(connection)
        print("socket settings (keepalive, idle, interval, count, user timeout ms): \(settings)")
        #expect(settings == [1, 15, 5, 3, 30_000])
    }

    @Test func theURLsOwnSettingsWinInTheURLForm() throws {
        let url = try TestDatabase.url()
        let connection = try QueueSession.connect(url: url + (url.contains("?") ? "&" : "?") + "keepalives_idle=7&tcp_user_timeout=4000",
                                                  applicationName: "pushd-tests")
        defer { connection.close() }
        #expect(Self.socketSettings(connection) == [1, 7, 5, 3, 4_000])
    }

    @Test func theURLsOwnSettingsWinInTheKeywordForm() throws {
        // postgresql://user@host:port/name as keywords.
        let url = try TestDatabase.url()
        let match = try #require(url.firstMatch(of: /postgres(?:ql)?:\/\/([^@]+)@([^:\/]+):(\d+)\/([^?]+)/))
        let keywords = "host=\(match.2) port=\(match.3) dbname=\(match.4) user=\(match.1) keepalives_count=9 keepalives_interval=2"
        let connection = try QueueSession.connect(url: keywords, applicationName: "pushd-tests")
        defer { connection.close() }
        #expect(Self.socketSettings(connection) == [1, 15, 2, 9, 30_000])
    }

    /// libpq's PGCONNECT_TIMEOUT is how an operator bounds every libpq client of a host; a
    /// connect_timeout keyword of pushd's own would override it.
    @Test func libpqsConnectTimeoutVariableWinsOverTheDefault() throws {
        let url = try TestDatabase.url()
        let before = getenv("PGCONNECT_TIMEOUT").map { String(cString: $0) }
        setenv("PGCONNECT_TIMEOUT", "7", 1)
        defer {
            if let before { setenv("PGCONNECT_TIMEOUT", before, 1) } else { unsetenv("PGCONNECT_TIMEOUT") }
        }
        let connection = try QueueSession.connect(url: url, applicationName: "pushd-tests")
        defer { connection.close() }
        #expect(connection.connectionOption("connect_timeout") == "7")
        // The rest of the bounds stay: the variable names only the connect timeout.
        #expect(Self.socketSettings(connection) == [1, 15, 5, 3, 30_000])
        // A URL that sets its own still wins over both.
        let own = try QueueSession.connect(url: url + (url.contains("?") ? "&" : "?") + "connect_timeout=4", applicationName: "pushd-tests")
        defer { own.close() }
        #expect(own.connectionOption("connect_timeout") == "4")
    }

    @Test func keepalivesOffInTheURLTurnsThemOff() throws {
        let url = try TestDatabase.url()
        let connection = try QueueSession.connect(url: url + (url.contains("?") ? "&" : "?") + "keepalives=0", applicationName: "pushd-tests")
        defer { connection.close() }
        #expect(Self.socketSettings(connection)[0] == 0)
    }
}
