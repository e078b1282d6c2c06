import Foundation
import QueueStore

/// The throwaway PostgreSQL started by `scripts/with-postgres`, reached through
/// `PUSHD_TEST_DATABASE_URL`. Tests fail (never skip) without it.
public enum TestDatabase {
    public struct Missing: Error, CustomStringConvertible {
        public var description: String {
            "PUSHD_TEST_DATABASE_URL is not set: run the tests with `make test`, which starts a throwaway PostgreSQL"
        }
    }

    public static func url() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["PUSHD_TEST_DATABASE_URL"], !url.isEmpty else {
            throw Missing()
        }
        return url
    }

    public static func connect() throws -> PGConnection {
        try PGConnection(url: url(), applicationName: "pushd-tests")
    }

    /// A table name no other test uses, so suites can run in parallel.
    public static func uniqueName(_ prefix: String) -> String {
        "\(prefix)_\(UUID().uuidString.prefix(8).lowercased())"
    }
}
