import Locking

/// One `APNsClient` — one pool of connections — per key, typically (app credential,
/// environment): made on first use, kept until `shutdownAll`.
public final class APNsClientRegistry<Key: Hashable & Sendable>: Sendable {
    private let clients = Lock<[Key: APNsClient]>([:])

    public init() {}

    /// The client for `key`, made with `make` the first time. Concurrent first uses of one key
    /// make one client; `make` runs under the registry's lock, and starting a client is quick.
    public func client(for key: Key, make: () throws -> APNsClient) rethrows -> APNsClient {
        try clients.withLock { clients in
            if let existing = clients[key] { return existing }
            let made = try make()
            clients[key] = made
            return made
        }
    }

    /// Stops and forgets the client for `key`, letting its requests drain first.
    public func remove(_ key: Key, drainTimeoutMilliseconds: Int = 10_000) {
        let removed = clients.withLock { $0.removeValue(forKey: key) }
        removed?.shutdown(drainTimeoutMilliseconds: drainTimeoutMilliseconds)
    }

    /// Calls `body` with every client under the registry's lock, so a client being made now is
    /// either made before `body` sees the registry or after it returns.
    public func forEach(_ body: (Key, APNsClient) -> Void) {
        clients.withLock { clients in
            for (key, client) in clients { body(key, client) }
        }
    }

    public var keys: [Key] { clients.withLock { Array($0.keys) } }

    public func shutdownAll(drainTimeoutMilliseconds: Int = 10_000) {
        let all = clients.withLock { clients -> [APNsClient] in
            defer { clients.removeAll() }
            return Array(clients.values)
        }
        for client in all { client.shutdown(drainTimeoutMilliseconds: drainTimeoutMilliseconds) }
    }
}
