@testable import Dispatcher
import Testing

/// `ConnectionPolicy`'s growth: more connections while requests wait for a stream, never above
/// the ceiling, and back down as libcurl lets idle ones go. Plain values, no sockets.
@Suite struct ConnectionGrowthTests {
    private static let ms: UInt64 = 1_000_000
    /// One connection kept, up to three, 100 streams each, after 250 ms of waiting.
    private let growth = ConnectionGrowth(base: 1, ceiling: 3, streamsPerConnection: 100, delayNanoseconds: 250 * ms)

    /// A policy whose one connection is open and has answered.
    private func warm() -> ConnectionPolicy {
        var policy = ConnectionPolicy(backoff: ReconnectBackoff(initialMilliseconds: 100, maxMilliseconds: 1000, jitter: 0),
                                      growth: growth)
        _ = policy.handle(.connectionOpened)
        _ = policy.handle(.answered(connection: 0))
        return policy
    }

    /// Opens the connection libcurl makes after a raised limit (its id one above the newest
    /// that answered) and lets it answer.
    private func openAndAnswer(_ policy: inout ConnectionPolicy) {
        #expect(policy.handle(.connectionOpened) == .none)
        #expect(policy.handle(.answered(connection: policy.newestAnswered + 1)) == .none)
    }

    @Test func requestsWaitingForAStreamLongerThanTheDelayRaiseTheLimitByOne() {
        var policy = warm()
        #expect(policy.handle(.beforeWait(now: 0, waiting: true, idle: 0)) == .none)
        #expect(policy.handle(.beforeWait(now: 249 * Self.ms, waiting: true, idle: 249 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 250 * Self.ms, waiting: true, idle: 250 * Self.ms)) == .setConnectionLimit(2))
        #expect(policy.admissionLimit(configured: 100, now: 250 * Self.ms) == 200 - 100 + 1)
        openAndAnswer(&policy)
        #expect(policy.admissionLimit(configured: 100, now: 250 * Self.ms) == 200)
    }

    @Test func untilTheNewConnectionAnswersOnlyOneRequestMoreThanTheOthersCarryIsLetIn() {
        var policy = warm()
        _ = policy.handle(.beforeWait(now: 0, waiting: true, idle: 0))
        #expect(policy.handle(.beforeWait(now: 300 * Self.ms, waiting: true, idle: 300 * Self.ms)) == .setConnectionLimit(2))
        // The requests let in at once would all wait in libcurl for the new connection and go
        // on it before the server's SETTINGS (one stream for a token connection) are read.
        #expect(policy.admissionLimit(configured: 100, now: 300 * Self.ms) == 101)
        _ = policy.handle(.connectionOpened)
        _ = policy.handle(.answered(connection: 0))
        // Answers on the old connection say nothing of the new one's streams.
        #expect(policy.admissionLimit(configured: 100, now: 300 * Self.ms) == 101)
        _ = policy.handle(.answered(connection: 1))
        #expect(policy.admissionLimit(configured: 100, now: 300 * Self.ms) == 200)
    }

    @Test func theConnectionReplacingARetiredOneAlsoStartsWithOneRequest() {
        var policy = warm()
        #expect(policy.handle(.retireRequested(connection: 0, socket: 7)) == .holdAdmissions)
        #expect(policy.handle(.drained(connection: 0)) == .closeRetired(socket: 7))
        #expect(policy.admissionLimit(configured: 100, now: 0) == 1)
        _ = policy.handle(.answered(connection: 1))
        #expect(policy.admissionLimit(configured: 100, now: 0) == 100)
    }

    @Test func aLoopBusyAllAlongDoesNotGrowForItIsLimitedByCPUNotStreams() {
        var policy = warm()
        // Requests wait for a stream, but the loop never sleeps: it idled 40 ms of 250 (16 %).
        #expect(policy.handle(.beforeWait(now: 0, waiting: true, idle: 0)) == .none)
        #expect(policy.handle(.beforeWait(now: 250 * Self.ms, waiting: true, idle: 40 * Self.ms)) == .none)
        #expect(policy.connectionLimit == 1)
        // The next 250 ms it waits for answers half the time: streams are the limit now.
        #expect(policy.handle(.beforeWait(now: 500 * Self.ms, waiting: true, idle: 165 * Self.ms)) == .setConnectionLimit(2))
    }

    @Test func aBreakInTheWaitingStartsTheDelayAgain() {
        var policy = warm()
        _ = policy.handle(.beforeWait(now: 0, waiting: true, idle: 0))
        #expect(policy.handle(.beforeWait(now: 200 * Self.ms, waiting: false, idle: 200 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 300 * Self.ms, waiting: true, idle: 300 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 500 * Self.ms, waiting: true, idle: 500 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 550 * Self.ms, waiting: true, idle: 550 * Self.ms)) == .setConnectionLimit(2))
    }

    @Test func noLoopEverHasMoreThanTheCeiling() {
        var policy = warm()
        var now: UInt64 = 0
        var limits: [Int] = []
        for _ in 0..<20 {
            if case .setConnectionLimit(let limit) = policy.handle(.beforeWait(now: now, waiting: true, idle: now)) {
                limits.append(limit)
                openAndAnswer(&policy)
            }
            now += 300 * Self.ms
        }
        #expect(limits == [2, 3])
        #expect(policy.connectionLimit == 3)
        #expect(policy.admissionLimit(configured: 100, now: now) == 300)
    }

    @Test func theNextConnectionWaitsUntilTheNewOneIsOpenAndHasAnswered() {
        var policy = warm()
        _ = policy.handle(.beforeWait(now: 0, waiting: true, idle: 0))
        #expect(policy.handle(.beforeWait(now: 300 * Self.ms, waiting: true, idle: 300 * Self.ms)) == .setConnectionLimit(2))
        // libcurl has not opened the second connection yet.
        #expect(policy.handle(.beforeWait(now: 600 * Self.ms, waiting: true, idle: 600 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 900 * Self.ms, waiting: true, idle: 900 * Self.ms)) == .none)
        _ = policy.handle(.connectionOpened)
        // Open, but its SETTINGS are not known yet: one request at a time, no growth.
        #expect(policy.admissionLimit(configured: 100, now: 900 * Self.ms) == 1)
        #expect(policy.handle(.beforeWait(now: 1200 * Self.ms, waiting: true, idle: 1200 * Self.ms)) == .none)
        _ = policy.handle(.answered(connection: 1))
        #expect(policy.handle(.beforeWait(now: 1300 * Self.ms, waiting: true, idle: 1300 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 1550 * Self.ms, waiting: true, idle: 1550 * Self.ms)) == .setConnectionLimit(3))
    }

    @Test func noGrowthWhileAConnectionIsRetiredOrConnectsFail() {
        var policy = warm()
        _ = policy.handle(.retireRequested(connection: 4, socket: 7))
        _ = policy.handle(.beforeWait(now: 0, waiting: true, idle: 0))
        #expect(policy.handle(.beforeWait(now: 500 * Self.ms, waiting: true, idle: 500 * Self.ms)) == .none)
        _ = policy.handle(.drained(connection: 4))
        _ = policy.handle(.connectFailed(now: 500 * Self.ms, unitRandom: 0))
        _ = policy.handle(.beforeWait(now: 700 * Self.ms, waiting: true, idle: 700 * Self.ms))
        #expect(policy.handle(.beforeWait(now: 1500 * Self.ms, waiting: true, idle: 1500 * Self.ms)) == .none)
        #expect(policy.connectionLimit == 1)
    }

    @Test func closedConnectionsLowerTheLimitToWhatIsOpenButNeverBelowTheBase() {
        var policy = warm()
        for step in 0..<2 {
            let start = UInt64(step) * 1000 * Self.ms
            _ = policy.handle(.beforeWait(now: start, waiting: true, idle: start))
            _ = policy.handle(.beforeWait(now: start + 300 * Self.ms, waiting: true, idle: start + 300 * Self.ms))
            openAndAnswer(&policy)
        }
        #expect(policy.connectionLimit == 3)
        // libcurl closes the grown connections once they idle past idleCloseSeconds.
        #expect(policy.handle(.connectionClosed(socket: 10)) == .setConnectionLimit(2))
        #expect(policy.admissionLimit(configured: 100, now: 0) == 200)
        #expect(policy.handle(.connectionClosed(socket: 11)) == .setConnectionLimit(1))
        #expect(policy.handle(.connectionClosed(socket: 12)) == .none)
        #expect(policy.connectionLimit == 1)
    }

    @Test func withoutGrowthConfiguredTheLimitNeverMoves() {
        var policy = ConnectionPolicy(backoff: ReconnectBackoff())
        _ = policy.handle(.connectionOpened)
        _ = policy.handle(.answered(connection: 0))
        for second in 0..<10 {
            #expect(policy.handle(.beforeWait(now: UInt64(second) * 1000 * Self.ms, waiting: true, idle: UInt64(second) * 1000 * Self.ms)) == .none)
        }
        #expect(policy.admissionLimit(configured: 500, now: 0) == 500)
    }

    @Test func theConfigurationSharesTheCeilingBetweenThreadsAndSizesTheWindowForIt() throws {
        var configuration = DispatcherConfiguration(host: "localhost", threads: 2, connectionsPerThread: 1, streamsPerConnection: 500)
        #expect(configuration.connectionGrowth.ceiling == 1)
        #expect(configuration.effectiveMaxOutstanding == 2000)
        configuration.maxConnections = 8
        try configuration.validate()
        #expect(configuration.connectionGrowth == ConnectionGrowth(base: 1, ceiling: 4, streamsPerConnection: 500, delayNanoseconds: 250 * Self.ms))
        #expect(configuration.effectiveMaxOutstanding == 8000)
        configuration.maxConnections = 1
        #expect(throws: DispatcherConfigurationError.self) { try configuration.validate() }
    }
}
