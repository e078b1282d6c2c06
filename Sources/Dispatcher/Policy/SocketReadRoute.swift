/// How a loop hands a readable socket to libcurl.
///
/// libcurl 8.14 runs every transfer attached to a socket for each event on it
/// (`curl_multi_socket_action` → `Curl_multi_ev_expire_xfers`, lib/multi_ev.c): with 500
/// streams waiting on a connection, a read that brings 20 answers runs 500 transfers, and each
/// of the 480 unanswered ones calls `recvfrom` (EAGAIN) and `poll` to find nothing. Instead the
/// loop can run one transfer of that connection (`curl_easy_pause(CURLPAUSE_CONT)`, then
/// libcurl's timer action): it reads the socket for the whole connection, the HTTP/2 filter
/// marks the streams whose frames it read (`drain_stream`), and libcurl runs only those.
///
/// Only plain readability goes that way, only with at least `minimumInFlight` requests inside
/// libcurl (few streams cost little per event), and only while such reads keep finishing
/// answered requests: after one that finished nothing, or a request without an answer (a
/// broken or closing connection), the next event goes to libcurl as it is, so every transfer
/// on a failing connection sees it.
///
/// A plain value: the loop asks it per event and tells it how each round of events ended.
struct SocketReadRoute: Equatable {
    let enabled: Bool
    let minimumInFlight: Int
    /// The last round read through one transfer finished nothing, or a request without an answer.
    private(set) var fallBack = false

    init(enabled: Bool, minimumInFlight: Int) {
        self.enabled = enabled
        self.minimumInFlight = minimumInFlight
    }

    /// Whether a socket with `readable`, `writable` and `failed` (error or hang-up) events is
    /// read through one of its transfers, with `inFlight` requests inside libcurl.
    func throughOneTransfer(readable: Bool, writable: Bool, failed: Bool, inFlight: Int) -> Bool {
        enabled && !fallBack && readable && !writable && !failed && inFlight >= minimumInFlight
    }

    /// A round of socket events ended: `throughOneTransfer` when some socket was read through
    /// one transfer; it finished `answered` requests with an HTTP status and `unanswered` without.
    mutating func roundFinished(throughOneTransfer: Bool, answered: Int, unanswered: Int) {
        fallBack = throughOneTransfer && (answered == 0 || unanswered > 0)
    }
}
