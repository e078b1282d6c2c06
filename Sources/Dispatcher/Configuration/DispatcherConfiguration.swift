import APNs
import Glibc

/// Where a dispatcher sends and how it authenticates: one pool of connections per
/// (credential, environment, host), so one `DispatcherConfiguration` per such triple.
public struct DispatcherConfiguration: Sendable {
    /// Scheme is always https; TLS peer and host verification are always on.
    public var host: String
    public var port: Int
    public var credential: ClientCredential
    /// PEM file of CAs to trust instead of the system store (for apns-mock or a private CA).
    public var trustedCAFile: String?
    /// `http://host:port` or `https://host:port` proxy; nil for a direct connection.
    public var proxy: String?
    /// PEM file of CAs for an HTTPS proxy's certificate.
    public var proxyCAFile: String?

    /// Event-loop threads, each with its own multi handle, connections and easy handles.
    public var threads: Int
    /// Connections per thread that carry requests.
    public var connectionsPerThread: Int
    /// The most streams used per connection; the server's SETTINGS may lower it at any time and
    /// libcurl follows that, but transfers beyond the server's limit wait inside libcurl.
    public var streamsPerConnection: Int
    /// Requests accepted but not yet completed, across all threads; `submit` blocks beyond it.
    /// nil: twice what the threads may keep inside libcurl (maxConnections × streams × 2).
    public var maxOutstanding: Int?
    /// The most connections across the threads. While requests wait for a free stream for
    /// `connectionGrowthDelayMilliseconds` and every connection carries its streams, a thread
    /// opens one more, up to its share (maxConnections ÷ threads); libcurl closes connections
    /// idle for `idleCloseSeconds`, and the limit follows them down to `connectionsPerThread`.
    /// nil: threads × connectionsPerThread, no growth.
    public var maxConnections: Int?
    public var connectionGrowthDelayMilliseconds: Int = 250
    /// A grown connection is kept only when the answer rate over this long after it answered
    /// rose against the same span before it (`ConnectionGrowth.requiredShareOfGain`), first with a
    /// quarter of its streams (at least 100), then with all of them; otherwise the limit goes back
    /// down and growth holds off (30 s, doubling to 8 min). 0: kept unjudged.
    public var connectionGrowthJudgedOverMilliseconds: Int = 1000
    /// Nice value of the event-loop threads (0…19): above 0, a bulk lane's loops give way to
    /// an urgent lane's for the CPU.
    public var threadNiceness: Int32 = 0
    /// While at least `answerCoalescingMinimumInFlight` requests are inside libcurl, a loop
    /// reads its sockets at most once per this many milliseconds, so each read carries many
    /// answers: libcurl runs every transfer on a connection for each event on its socket
    /// (docs/dispatcher-measurements.md, "Answers at long round trips"). 0 reads as soon as an answer arrives.
    public var answerCoalescingMilliseconds: Int = 0
    public var answerCoalescingMinimumInFlight: Int = 100
    /// While at least `answerCoalescingMinimumInFlight` requests are inside libcurl, a readable
    /// socket is read through one of its transfers, and libcurl runs only that one and those
    /// whose frames it read, instead of every transfer on the connection (`SocketReadRoute`,
    /// docs/dispatcher.md "Reading a socket through one transfer").
    public var readsSocketsThroughOneTransfer = false
    /// Each loop keeps inside libcurl only as many requests as its rate needs, found by trying
    /// (`InFlightWindow`, docs/dispatcher.md "Adaptive in-flight limit"), between
    /// `adaptiveInFlightFloor` and its share of `maxConnections` × streams and of
    /// `maxOutstanding`; it starts at `adaptiveInFlightInitial`. false: connections × streams.
    public var adaptiveInFlight = false
    /// 64: a rate-capped campaign (which the window never holds back, so it shrinks to this)
    /// still sends 600/s per loop at a round trip of 100 ms.
    public var adaptiveInFlightFloor = 64
    public var adaptiveInFlightInitial = 100
    /// Each answered request's result carries where its time went (`TransferTimings`): three
    /// more libcurl look-ups per request, for a lane whose every request is traced.
    public var recordsTransferTimings = false

    public var connectTimeoutMilliseconds: Int
    /// Whole-request limit including time queued in libcurl for a stream; 0 for none.
    public var requestTimeoutMilliseconds: Int
    /// Every submitted request is answered within this many milliseconds of its submission
    /// (plus an event loop's wake-up): an attempt is put on the wire only while a whole
    /// `requestTimeoutMilliseconds` still fits before the deadline, and a request that never
    /// went on the wire by then is answered `DispatchResult.Outcome.notSent`. A caller that waits this
    /// long (plus a margin) for every answer never gives up on a request the engine still
    /// holds and may send later. 0: no deadline.
    public var answerDeadlineMilliseconds: Int = 0
    /// TCP keep-alive probes start on a connection idle this long (whole seconds, at least 1).
    public var keepAliveIntervalMilliseconds: Int
    /// An idle connection whose keep-alive probes go unanswered this long is dead: three
    /// probes, a third of this apart. libcurl then finds it closed before reusing it.
    public var keepAliveTimeoutMilliseconds: Int
    /// Connections unused longer than this are not reused: libcurl closes such a connection
    /// when the next request looks for one, and that request opens a new connection. 0 keeps
    /// idle connections (Apple asks providers to keep them open): only a connection the server
    /// or TCP keep-alive ended is replaced.
    public var idleCloseSeconds: Int
    /// What `CURLOPT_MAXAGE_CONN` is set to when `idleCloseSeconds` is 0: ten years, far from
    /// overflowing libcurl's milliseconds.
    static let keptIdleSeconds = 315_360_000
    /// Transport attempts per request, counting the first; retries are transparent.
    public var maxAttempts: Int
    public var reconnectBackoff: ReconnectBackoff

    public init(host: String, port: Int = 443, credential: ClientCredential = .token,
                trustedCAFile: String? = nil, proxy: String? = nil, proxyCAFile: String? = nil,
                threads: Int = DispatcherConfiguration.defaultThreads, connectionsPerThread: Int = 1,
                streamsPerConnection: Int = 1000, maxOutstanding: Int? = nil,
                connectTimeoutMilliseconds: Int = 10_000, requestTimeoutMilliseconds: Int = 30_000,
                keepAliveIntervalMilliseconds: Int = 60_000, keepAliveTimeoutMilliseconds: Int = 20_000,
                idleCloseSeconds: Int = 600,
                maxAttempts: Int = 3, reconnectBackoff: ReconnectBackoff = ReconnectBackoff()) {
        self.host = host
        self.port = port
        self.credential = credential
        self.trustedCAFile = trustedCAFile
        self.proxy = proxy
        self.proxyCAFile = proxyCAFile
        self.threads = threads
        self.connectionsPerThread = connectionsPerThread
        self.streamsPerConnection = streamsPerConnection
        self.maxOutstanding = maxOutstanding
        self.connectTimeoutMilliseconds = connectTimeoutMilliseconds
        self.requestTimeoutMilliseconds = requestTimeoutMilliseconds
        self.keepAliveIntervalMilliseconds = keepAliveIntervalMilliseconds
        self.keepAliveTimeoutMilliseconds = keepAliveTimeoutMilliseconds
        self.idleCloseSeconds = idleCloseSeconds
        self.maxAttempts = maxAttempts
        self.reconnectBackoff = reconnectBackoff
    }

    public static var defaultThreads: Int {
        let count = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        return count > 0 ? count : 1
    }

    var effectiveMaxOutstanding: Int { maxOutstanding ?? threads * connectionGrowth.ceiling * streamsPerConnection * 2 }

    /// One thread's growth: its configured connections up to its share of `maxConnections`.
    var connectionGrowth: ConnectionGrowth {
        let ceiling = max(connectionsPerThread, (maxConnections ?? 0) / max(1, threads))
        return ConnectionGrowth(base: connectionsPerThread, ceiling: ceiling, streamsPerConnection: streamsPerConnection,
                                delayNanoseconds: UInt64(max(0, connectionGrowthDelayMilliseconds)) * 1_000_000,
                                judgedOverNanoseconds: UInt64(max(0, connectionGrowthJudgedOverMilliseconds)) * 1_000_000,
                                trialFirstStep: ConnectionGrowth.firstStepStreams(streamsPerConnection: streamsPerConnection))
    }

    /// One loop's adaptive window, nil when the limit is pinned.
    var adaptiveInFlightWindow: InFlightWindow? {
        guard adaptiveInFlight else { return nil }
        let growth = connectionGrowth
        let ceiling = min(growth.ceiling * streamsPerConnection, max(1, effectiveMaxOutstanding / threads))
        return InFlightWindow(floor: adaptiveInFlightFloor, ceiling: ceiling, initial: adaptiveInFlightInitial)
    }

    /// Requests one thread keeps inside libcurl; the rest of its share waits in the engine's queue,
    /// where waiting is cheap.
    var inFlightPerThread: Int { connectionsPerThread * streamsPerConnection }

    /// Checks every field and names the first one that is wrong.
    public func validate() throws(DispatcherConfigurationError) {
        if host.isEmpty || host.utf8.contains(where: { $0 <= 0x20 || $0 == UInt8(ascii: "/") }) {
            throw .invalid(field: "host", value: host, expected: "a host name or address without spaces or slashes")
        }
        if !(1...65535).contains(port) { throw .invalid(field: "port", value: String(port), expected: "1…65535 (APNs uses 443 or 2197)") }
        if threads < 1 || threads > 256 { throw .invalid(field: "threads", value: String(threads), expected: "1…256") }
        if connectionsPerThread < 1 || connectionsPerThread > 64 {
            throw .invalid(field: "connectionsPerThread", value: String(connectionsPerThread), expected: "1…64")
        }
        if streamsPerConnection < 1 || streamsPerConnection > 100_000 {
            throw .invalid(field: "streamsPerConnection", value: String(streamsPerConnection), expected: "1…100000")
        }
        if let maxConnections, maxConnections < threads * connectionsPerThread || maxConnections > threads * 1024 {
            throw .invalid(field: "maxConnections", value: String(maxConnections),
                           expected: "threads × connectionsPerThread (\(threads * connectionsPerThread)) … \(threads * 1024)")
        }
        if connectionGrowthJudgedOverMilliseconds < 0 {
            throw .invalid(field: "connectionGrowthJudgedOverMilliseconds", value: String(connectionGrowthJudgedOverMilliseconds), expected: "0 or more")
        }
        if connectionGrowthDelayMilliseconds < 0 {
            throw .invalid(field: "connectionGrowthDelayMilliseconds", value: String(connectionGrowthDelayMilliseconds), expected: "0 or more")
        }
        if !(0...50).contains(answerCoalescingMilliseconds) {
            throw .invalid(field: "answerCoalescingMilliseconds", value: String(answerCoalescingMilliseconds), expected: "0…50")
        }
        if answerCoalescingMinimumInFlight < 1 {
            throw .invalid(field: "answerCoalescingMinimumInFlight", value: String(answerCoalescingMinimumInFlight), expected: "1 or more")
        }
        if adaptiveInFlightFloor < 1 || adaptiveInFlightInitial < adaptiveInFlightFloor {
            throw .invalid(field: "adaptiveInFlightFloor", value: "\(adaptiveInFlightFloor) (initial \(adaptiveInFlightInitial))",
                           expected: "1 or more, and adaptiveInFlightInitial at least as much")
        }
        if let maxOutstanding, maxOutstanding < threads {
            throw .invalid(field: "maxOutstanding", value: String(maxOutstanding), expected: "at least one per thread (\(threads))")
        }
        if connectTimeoutMilliseconds < 1 {
            throw .invalid(field: "connectTimeoutMilliseconds", value: String(connectTimeoutMilliseconds), expected: "a positive number")
        }
        if requestTimeoutMilliseconds < 0 {
            throw .invalid(field: "requestTimeoutMilliseconds", value: String(requestTimeoutMilliseconds), expected: "0 (none) or more")
        }
        if answerDeadlineMilliseconds < 0 {
            throw .invalid(field: "answerDeadlineMilliseconds", value: String(answerDeadlineMilliseconds), expected: "0 (none) or more")
        }
        if keepAliveIntervalMilliseconds < 1 {
            throw .invalid(field: "keepAliveIntervalMilliseconds", value: String(keepAliveIntervalMilliseconds), expected: "a positive number")
        }
        if keepAliveTimeoutMilliseconds < 1 {
            throw .invalid(field: "keepAliveTimeoutMilliseconds", value: String(keepAliveTimeoutMilliseconds), expected: "a positive number")
        }
        if idleCloseSeconds < 0 { throw .invalid(field: "idleCloseSeconds", value: String(idleCloseSeconds), expected: "0 (keep idle connections) or more") }
        if maxAttempts < 1 { throw .invalid(field: "maxAttempts", value: String(maxAttempts), expected: "1 or more") }
        if let proxy, !(proxy.hasPrefix("http://") || proxy.hasPrefix("https://")) {
            throw .invalid(field: "proxy", value: proxy, expected: "an http:// or https:// URL")
        }
        for (field, path) in [("trustedCAFile", trustedCAFile), ("proxyCAFile", proxyCAFile)] {
            if let path, access(path, R_OK) != 0 { throw .unreadableFile(field: field, path: path) }
        }
    }
}

/// How the TLS connection authenticates to APNs.
public enum ClientCredential: Sendable, Equatable {
    /// Provider-token auth: each request carries its own `authorization: bearer …` header.
    case token
    /// A TLS client certificate and its key, loaded and checked once (`ClientCertificate.load`).
    /// libcurl takes them from memory, so a file changed on disk changes nothing; the engine
    /// presents another certificate only when told to (`HTTP2Dispatcher.replaceCertificate`).
    case certificate(ClientIdentity)

    /// The certificate, nil for token auth.
    public var identity: ClientIdentity? {
        if case .certificate(let identity) = self { return identity }
        return nil
    }
}

public enum DispatcherConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalid(field: String, value: String, expected: String)
    case unreadableFile(field: String, path: String)
    case transportRejected(setting: String, message: String)

    public var description: String {
        switch self {
        case .invalid(let field, let value, let expected): return "dispatcher setting \(field) = \"\(value)\" is invalid: expected \(expected)"
        case .unreadableFile(let field, let path): return "dispatcher setting \(field): cannot read file \"\(path)\""
        case .transportRejected(let setting, let message): return "libcurl rejected \(setting): \(message)"
        }
    }
}
