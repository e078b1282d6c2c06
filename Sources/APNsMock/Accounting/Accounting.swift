import Locking
import Synchronization

/// Counts answers for the whole server; shared by all loop threads.
final class Accounting: Sendable {
    private struct State {
        var stats = MockStats()
        var log: [AcceptedNotification] = []
    }

    private let state = Lock(State())
    /// Counted on every request, so a relaxed atomic rather than the lock.
    private let received = Atomic<Int>(0)
    private let delayedAnswerWrites = Atomic<Int>(0)
    let countsPerToken: Bool
    let logLimit: Int

    init(countsPerToken: Bool, logLimit: Int = .max) {
        self.countsPerToken = countsPerToken
        self.logLimit = logLimit
    }

    /// `entry` is nil unless the server keeps the accepted log.
    func recordAccepted(_ entry: AcceptedNotification?, token: String?) {
        state.withLock { state in
            state.stats.accepted += 1
            if countsPerToken, let token { state.stats.perToken[token, default: TokenCounts()].accepted += 1 }
            if let entry {
                if state.log.count < logLimit { state.log.append(entry) } else { state.stats.acceptedNotLogged += 1 }
            }
        }
    }

    func recordRejected(status: Int, reason: String, token: String?) {
        state.withLock { state in
            state.stats.rejected["\(status) \(reason)", default: 0] += 1
            if countsPerToken, let token { state.stats.perToken[token, default: TokenCounts()].rejected += 1 }
        }
    }

    func recordConnectionAccepted() {
        state.withLock { state in
            state.stats.connectionsAccepted += 1
            state.stats.connectionsOpenPeak = max(state.stats.connectionsOpenPeak,
                                                  state.stats.connectionsAccepted - state.stats.connectionsClosed)
        }
    }
    func recordConnectionClosed(byClient: Bool = false) {
        state.withLock { state in
            state.stats.connectionsClosed += 1
            if byClient { state.stats.connectionsClosedByClient += 1 }
        }
    }
    func recordReset() { state.withLock { $0.stats.connectionsReset += 1 } }
    func recordStreamReset() { state.withLock { $0.stats.streamsReset += 1 } }
    func recordTokenVerifications(_ count: Int) { state.withLock { $0.stats.providerTokenVerifications += count } }
    func recordPing() { state.withLock { $0.stats.pingsReceived += 1 } }
    func recordClientReset(afterAnswer: Bool) {
        state.withLock { state in
            state.stats.clientResets += 1
            if afterAnswer { state.stats.clientResetsAfterAnswer += 1 }
        }
    }
    func recordRefusedStream() { state.withLock { $0.stats.streamsRefused += 1 } }
    func recordRefusedCertificate() { state.withLock { $0.stats.clientCertificatesRefused += 1 } }
    func recordClientCertificate(connectionID: UInt64, subject: String) {
        state.withLock { $0.stats.clientCertificateSubjects[connectionID] = subject }
    }
    func recordHandshakeResumed() { state.withLock { $0.stats.handshakesResumed += 1 } }
    func recordGoaway(connectionID: UInt64, lastStreamID: Int32) {
        state.withLock { $0.stats.goaways.append(GoawayRecord(connectionID: connectionID, lastStreamID: lastStreamID)) }
    }

    /// A complete request for `path`: counted for its device token too when the server counts per token.
    func recordRequestReceived(path: String) {
        received.add(1, ordering: .relaxed)
        guard countsPerToken, path.hasPrefix(Self.devicePath) else { return }
        let token = path.dropFirst(Self.devicePath.count).lowercased()
        state.withLock { $0.stats.perToken[token, default: TokenCounts()].received += 1 }
    }

    private static let devicePath = "/3/device/"

    func recordDelayedAnswerWrite() { delayedAnswerWrites.add(1, ordering: .relaxed) }

    var stats: MockStats {
        var stats = state.withLock { $0.stats }
        stats.requestsReceived = received.load(ordering: .relaxed)
        stats.delayedAnswerWrites = delayedAnswerWrites.load(ordering: .relaxed)
        return stats
    }
    var acceptedLog: [AcceptedNotification] { state.withLock { $0.log } }

    func reset() {
        state.withLock { $0 = State() }
        received.store(0, ordering: .relaxed)
        delayedAnswerWrites.store(0, ordering: .relaxed)
    }
}
