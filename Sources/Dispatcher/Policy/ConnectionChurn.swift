/// Connections that answer a few requests and are then lost with the rest unanswered, as a
/// plain value: how many answers each recent connection gave and when its first came, and
/// whether a lost one was churned — ended by the server (a GOAWAY, RST_STREAM on its other
/// streams, a TCP reset) right after it began answering, as an overloaded or misbehaving front
/// end or middlebox ends every new connection.
///
/// The rule: a connection lost within `shortLifeNanoseconds` of its first answer, having
/// answered fewer than `fewAnswers`, churned. A churned connection that comes within
/// `streakNanoseconds` of the last one, with no connection proving well in between (answering
/// `fewAnswers`, answering again `shortLifeNanoseconds` after its first answer, or lost after a
/// longer life), is a failed connection (`ConnectionPolicy`); the
/// first of a streak is not. Why these bounds:
/// - A healthy end comes after many answers or a long life: APNs recycling a connection, an
///   idle close, the mock's GOAWAY after N streams (20 answers with 80 refused, at once, is
///   healthy: a handshake per 20 answers). Those resend at once, with no backoff.
/// - Fewer than `fewAnswers` but long-lived is a quiet connection (one notification a minute)
///   that the server or the path closed: healthy too.
/// - The first churned connection is let go: APNs starts a token connection at one stream, and
///   requests libcurl put on a fresh connection before its SETTINGS arrived (its own resends
///   after a GOAWAY) are refused after one answer (`ConnectionPolicy.opensAbove`, `cold`);
///   once is normal. Its requests go again, one on the next connection until it answers
///   (`ConnectionPolicy.resendsHeldAbove`), so a loss of that one is the server's doing.
///   Churn is connection after connection:
///   from the second in a row each one counts, so the failure run applies (growing backoff,
///   its announcement, hand-back from the third). The streak's window is longer than the
///   longest backoff, so that the connection opened after one still counts.
/// - Counting what a connection left unanswered would not do: the one count that is known when
///   the first loss is reported is the answers, and the healthy GOAWAY above leaves more
///   unanswered than it answered.
struct ConnectionChurn: Equatable {
    enum Verdict: Equatable {
        /// It answered enough, or lived long enough (or is not remembered): its requests go
        /// again at once.
        case healthy
        /// It churned, and is the first of a streak: no failure, its requests go again at once.
        case firstChurned
        /// It churned again: a failed connection.
        case churned
        /// Another of its requests reported its loss, already judged.
        case judged
    }

    static let fewAnswers = 5
    static let shortLifeNanoseconds: UInt64 = 2_000_000_000
    /// The shortest window of a streak; `init` lengthens it to twice the longest backoff.
    static let shortestStreakNanoseconds: UInt64 = 10_000_000_000

    private struct Record: Equatable {
        let connection: Int64
        /// Answers heard from libcurl's header callback (`noteAnswer`), and answers of finished
        /// transfers (`ConnectionPolicy.Event.answered`): the same answers, seen twice; the
        /// larger is the count. Both stop at `fewAnswers`.
        var heard = 0
        var finished = 0
        let firstAnswerAt: UInt64
        /// When its last answer came (followed while it gave fewer than `fewAnswers`).
        var lastAnswerAt: UInt64
        /// Its loss was judged: the reports of its other requests change nothing.
        var lossJudged = false
        var answers: Int { max(heard, finished) }
    }

    /// The most recent connections that answered, oldest first.
    private var records: [Record] = []
    private let capacity: Int
    /// How close churned connections must follow each other to make a streak.
    let streakNanoseconds: UInt64
    /// When the last churned connection was lost; nil once a connection proved well since.
    private(set) var lastChurnedAt: UInt64?
    /// When a connection last proved well (its fifth answer, or an answer past the short life).
    /// A connection judged after the fact (closed in order, its end at its last answer) that
    /// ended before then is no part of a streak: a newer connection proved well since.
    private(set) var provedWellAt: UInt64 = 0

    init(capacity: Int = 64, longestBackoffMilliseconds: Int = 0) {
        self.capacity = capacity
        streakNanoseconds = max(Self.shortestStreakNanoseconds, 2 * UInt64(max(0, longestBackoffMilliseconds)) * 1_000_000)
    }

    /// One answer arrived on `connection` at `now` (read only for its first answer). `heard`:
    /// from the header callback, else from a finished transfer.
    mutating func answered(on connection: Int64, heard: Bool, now: @autoclosure () -> UInt64) {
        guard connection >= 0 else { return }
        // Most answers come on the newest connection, which already answered enough.
        let index: Int
        if let last = records.indices.last, records[last].connection == connection {
            guard records[last].answers < Self.fewAnswers else { return }
            index = last
        } else if let found = records.lastIndex(where: { $0.connection == connection }) {
            index = found
        } else {
            let first = now()
            records.append(Record(connection: connection, firstAnswerAt: first, lastAnswerAt: first))
            if records.count > capacity { records.removeFirst() }
            index = records.count - 1
        }
        let before = records[index].answers
        if heard {
            records[index].heard = min(Self.fewAnswers, records[index].heard + 1)
        } else {
            records[index].finished = min(Self.fewAnswers, records[index].finished + 1)
        }
        // A new answer (not the other sighting of one already counted): when it came.
        if records[index].answers > before, before > 0 { records[index].lastAnswerAt = now() }
        if records[index].answers >= Self.fewAnswers {
            lastChurnedAt = nil
            if before < Self.fewAnswers { provedWellAt = max(provedWellAt, now()) }
        } else if records[index].answers > before, records[index].answers > 1,
                  records[index].lastAnswerAt &- min(records[index].lastAnswerAt, records[index].firstAnswerAt) >= Self.shortLifeNanoseconds {
            // Answering again after the short life, it outlived churn: proved well, as a quiet
            // lane's connection does (one notification a minute would take minutes to answer 5).
            lastChurnedAt = nil
            provedWellAt = max(provedWellAt, records[index].lastAnswerAt)
        }
    }

    /// Answers `connection` gave (at most `fewAnswers`) and when the first came; nil when it is
    /// older than every connection remembered (it answered long ago). A connection not
    /// remembered but newer than the oldest remembered (or while fewer than `capacity` are)
    /// never answered.
    func answers(on connection: Int64) -> (count: Int, firstAt: UInt64)? {
        if let record = records.last(where: { $0.connection == connection }) { return (record.answers, record.firstAnswerAt) }
        guard records.count >= capacity, let oldest = records.min(by: { $0.connection < $1.connection }), connection < oldest.connection else {
            return (0, 0)
        }
        return nil
    }

    /// Whether libcurl moved requests off `connection` because it refused them before its
    /// SETTINGS were read: it gave at most one answer (one older than every connection
    /// remembered answered long ago). Else the server ended it with a GOAWAY.
    func refusedBeforeAnswering(_ connection: Int64) -> Bool {
        answers(on: connection).map { $0.count <= 1 } ?? false
    }

    /// Whether `connection`, which answered, churned if lost at `now` and was not judged yet:
    /// answered fewer than `fewAnswers` within `shortLifeNanoseconds` of its first answer.
    func churns(_ connection: Int64, now: UInt64) -> Bool {
        guard let record = records.last(where: { $0.connection == connection }) else { return false }
        return !record.lossJudged && Self.churned(record, now: now)
    }

    /// Whether a loss of `connection` has a judgement to make: it is remembered and no loss of
    /// it was judged yet.
    func awaitsJudgement(_ connection: Int64) -> Bool {
        records.last(where: { $0.connection == connection }).map { !$0.lossJudged } ?? false
    }

    /// How long after its last answer a connection ended in order may be closed and still be
    /// judged by its answers: libcurl (8.9 and later) shuts a connection down before it closes
    /// its socket, for up to 2 s by default, when the server does not close its side first.
    /// The loop keeps it below the idle close (`CurlEventLoop.closeAfterLastAnswerNanoseconds`).
    static let closeAfterLastAnswerNanoseconds: UInt64 = 3_000_000_000

    /// When `connection`, closed by libcurl at `closedAt` with nothing of it failed, ended, if it
    /// churned: it answered fewer than `fewAnswers`, all within `shortLifeNanoseconds` of the
    /// first, and was closed less than `within` after the last (a connection let go idle, or
    /// long after, is not judged so); its loss not judged yet. Its last answer is when it
    /// ended: the close may come a shutdown later.
    func endedInOrder(_ connection: Int64, closedAt: UInt64, within: UInt64 = closeAfterLastAnswerNanoseconds) -> UInt64? {
        guard let record = records.last(where: { $0.connection == connection }), !record.lossJudged,
              Self.churned(record, now: record.lastAnswerAt),
              closedAt &- min(closedAt, record.lastAnswerAt) < within else { return nil }
        return record.lastAnswerAt
    }

    private static func churned(_ record: Record, now: UInt64) -> Bool {
        record.answers > 0 && record.answers < fewAnswers && now &- min(now, record.firstAnswerAt) < shortLifeNanoseconds
    }

    /// `connection`, which answered, was lost at `now`.
    mutating func judgeLoss(of connection: Int64, now: UInt64) -> Verdict {
        guard let index = records.lastIndex(where: { $0.connection == connection }) else {
            lastChurnedAt = nil
            return .healthy
        }
        guard !records[index].lossJudged else { return .judged }
        records[index].lossJudged = true
        guard Self.churned(records[index], now: now) else {
            lastChurnedAt = nil
            return .healthy
        }
        // Judged after the fact (`endedInOrder`): a newer connection proved well after it ended.
        if provedWellAt > now { return .healthy }
        defer { lastChurnedAt = now }
        if let last = lastChurnedAt, now &- min(now, last) < streakNanoseconds { return .churned }
        return .firstChurned
    }
}
