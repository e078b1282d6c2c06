import Locking

/// Why the endpoint refused or ended a connection, as `pushd_metrics_connections_refused_total`
/// names it.
public enum EndpointRefusal: String, Sendable, CaseIterable {
    /// Its address already held `perIPConnectionLimit` connections: closed as it was accepted.
    case perAddressLimit = "per_address_limit"
    /// It did not send a whole request head within `requestTimeoutSeconds` of opening or of
    /// its previous answer (slowloris: a header byte now and then; or never a byte at all).
    case requestTimeout = "request_timeout"
    /// It did not take its answer within `answerTimeoutSeconds` (a client that stopped reading).
    case answerTimeout = "answer_timeout"
}

/// Every connection of the endpoint from accept to close: which phase it is in (waiting for
/// its request, or for its answer to be taken) and since when, and how many each address
/// holds. libmicrohttpd's own time-out counts from the last byte moved, so a client that sends
/// one header byte every few seconds, or reads a little of its answer now and then, would keep
/// its slot for ever; here a request and an answer each have a deadline, whatever trickles.
///
/// Thread rule: called from libmicrohttpd's pool threads (admission, start, request, answer,
/// close) and from the server's sweeper thread; all state sits under `state`'s lock, and
/// `sweep` ends a connection's socket under that lock, so a socket the library has already
/// closed (and whose number may be reused) is never touched: the library reports the close
/// before it closes the descriptor.
final class ConnectionWatch: Sendable {
    enum Phase: Sendable, Equatable {
        case request
        case answer
    }

    struct Entry: Sendable, Equatable {
        var descriptor: Int32
        var address: [UInt8]
        var phase: Phase
        var since: Double
        /// Already ended by `sweep`; the library has not reported the close yet.
        var ended = false
    }

    private struct State {
        /// By the library's connection handle.
        var entries: [UInt: Entry] = [:]
        var perAddress: [[UInt8]: Int] = [:]
    }

    let perAddressLimit: Int
    let requestTimeout: Double
    let answerTimeout: Double
    private let state = Lock(State())

    init(perAddressLimit: Int, requestTimeout: Double, answerTimeout: Double) {
        self.perAddressLimit = perAddressLimit
        self.requestTimeout = requestTimeout
        self.answerTimeout = answerTimeout
    }

    /// Whether a connection from `address` may be served: fewer than `perAddressLimit` open
    /// from it (0: no bound). Two pool threads admitting at the same moment may let one more in.
    func admits(_ address: [UInt8]) -> Bool {
        guard perAddressLimit > 0 else { return true }
        return state.withLock { ($0.perAddress[address] ?? 0) < perAddressLimit }
    }

    func opened(_ connection: UInt, descriptor: Int32, address: [UInt8], now: Double) {
        state.withLock { state in
            state.entries[connection] = Entry(descriptor: descriptor, address: address, phase: .request, since: now)
            state.perAddress[address, default: 0] += 1
        }
    }

    /// The request head is in: its answer is being sent from now.
    func requestArrived(_ connection: UInt, now: Double) {
        state.withLock { state in
            guard state.entries[connection] != nil else { return }
            state.entries[connection]!.phase = .answer
            state.entries[connection]!.since = now
        }
    }

    /// The answer was taken (or the request given up): a kept-alive connection waits for its
    /// next request from now.
    func answered(_ connection: UInt, now: Double) {
        state.withLock { state in
            guard state.entries[connection] != nil else { return }
            state.entries[connection]!.phase = .request
            state.entries[connection]!.since = now
        }
    }

    func closed(_ connection: UInt) {
        state.withLock { state in
            guard let entry = state.entries.removeValue(forKey: connection) else { return }
            let left = (state.perAddress[entry.address] ?? 1) - 1
            state.perAddress[entry.address] = left > 0 ? left : nil
        }
    }

    /// Ends, with `end` (given the socket, under the lock), every connection past its phase's
    /// deadline at `now`, once each, and says why for each.
    func sweep(now: Double, end: (Int32) -> Void) -> [EndpointRefusal] {
        state.withLock { state in
            var ended = [EndpointRefusal]()
            for (connection, entry) in state.entries where !entry.ended {
                let limit = entry.phase == .request ? requestTimeout : answerTimeout
                guard now - entry.since >= limit else { continue }
                state.entries[connection]!.ended = true
                if entry.descriptor >= 0 { end(entry.descriptor) }
                ended.append(entry.phase == .request ? .requestTimeout : .answerTimeout)
            }
            return ended
        }
    }

    /// Connections open now, and how many of them the busiest address holds.
    var counts: (open: Int, busiestAddress: Int) {
        state.withLock { (open: $0.entries.count, busiestAddress: $0.perAddress.values.max() ?? 0) }
    }
}
