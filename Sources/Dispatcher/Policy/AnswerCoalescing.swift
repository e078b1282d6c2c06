/// How long an event loop lets answers gather on its sockets before it hands them to libcurl.
///
/// libcurl runs every transfer on a connection for each event on that connection's socket,
/// answered or not (`Curl_multi_ev_expire_xfers` in libcurl 8.14: each one is expired, run and
/// polled, and reads the socket once more to find nothing). With N streams in flight answering
/// at N ÷ round trip per second, that is about round trip ÷ gap transfer runs per answer,
/// whatever N is, where gap is the time between two reads of the socket. On loopback the gap is
/// the loop's own work and a read brings most of what is in flight; at 50–150 ms answers trickle
/// in a few per read and the runs cost more than the answers (docs/dispatcher-measurements.md,
/// "Answers at long round trips").
///
/// So when the loop spent at least 1/`waitedFractionDivisor` of the time before a read waiting
/// (blocked in epoll or paused here: answers, not its CPU, set the pace) and the read brought
/// fewer than 1/`thinReadDivisor` of the requests in flight, the loop waits until round trip ÷
/// `roundTripDivisor`, and never more than `maximumPause`, has passed since that read before
/// reading again. A loop busy all along (loopback under load) or whose reads bring most of what
/// is in flight never pauses, nor does one with fewer than `minimumInFlight` requests in
/// flight: few streams cost little per event, and a trickle of urgent requests waits for
/// nothing.
///
/// A plain value: the loop tells it about reads and answers and asks how long to pause.
struct AnswerCoalescing: Equatable {
    /// The longest pause (nanoseconds); 0 turns coalescing off.
    let maximumPause: UInt64
    let minimumInFlight: Int
    /// Smoothed time from a transfer entering libcurl to its answer (nanoseconds).
    private(set) var roundTrip: UInt64 = 0
    /// When the sockets were last read, and whether the loop should let answers gather after it.
    private(set) var lastRead: UInt64 = 0
    private(set) var gatherAfterLastRead = false

    static let roundTripDivisor: UInt64 = 4
    static let thinReadDivisor = 2
    static let waitedFractionDivisor: UInt64 = 4
    /// Weight of a new round trip in the smoothed one: 1/16.
    static let smoothingShift: UInt64 = 4

    init(maximumPauseMilliseconds: Int, minimumInFlight: Int) {
        maximumPause = UInt64(max(0, maximumPauseMilliseconds)) * 1_000_000
        self.minimumInFlight = minimumInFlight
    }

    var enabled: Bool { maximumPause > 0 }

    /// An answer arrived `nanoseconds` after its transfer entered libcurl.
    mutating func answered(after nanoseconds: UInt64) {
        if roundTrip == 0 {
            roundTrip = nanoseconds
        } else if nanoseconds >= roundTrip {
            roundTrip += (nanoseconds - roundTrip) >> Self.smoothingShift
        } else {
            roundTrip -= (roundTrip - nanoseconds) >> Self.smoothingShift
        }
    }

    /// The loop handed socket events to libcurl at `now`, after waiting `waited` nanoseconds
    /// since the previous read; they finished `answers` of the `inFlight` requests inside libcurl.
    mutating func socketsRead(at now: UInt64, waited: UInt64, answers: Int, inFlight: Int) {
        let since = now &- lastRead
        gatherAfterLastRead = waited >= since / Self.waitedFractionDivisor && answers * Self.thinReadDivisor < inFlight
        lastRead = now
    }

    /// The gap the loop keeps after a thin read.
    var gap: UInt64 { min(maximumPause, roundTrip / Self.roundTripDivisor) }

    /// Nanoseconds to pause at `now` before reading the sockets again, with `inFlight` requests
    /// inside libcurl; 0 to go on at once.
    func pause(now: UInt64, inFlight: Int) -> UInt64 {
        guard enabled, gatherAfterLastRead, inFlight >= minimumInFlight else { return 0 }
        let until = lastRead &+ gap
        return until > now ? until - now : 0
    }
}
