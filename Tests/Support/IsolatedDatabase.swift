import Foundation
import QueueStore

/// A database of its own for one test, created on the throwaway server and migrated.
/// The schema name `pushd` is fixed, so isolation between parallel tests is per database.
public struct IsolatedDatabase: Sendable {
    public let name: String
    public let url: String

    /// Creates `pushd_t_<random>`, runs `body`, and drops the database whatever happens.
    public static func with<T>(migrated: Bool = true, _ body: (IsolatedDatabase) throws -> T) throws -> T {
        let serverURL = try TestDatabase.url()
        let name = "pushd_t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
        let admin = try PGConnection(url: serverURL, applicationName: "pushd-tests-admin")
        try admin.execute(script: "CREATE DATABASE \(name)")
        let database = IsolatedDatabase(name: name, url: replacingDatabase(in: serverURL, with: name))
        defer { _ = try? admin.execute(script: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
        if migrated {
            let connection = try database.connect()
            try Migrator().migrate(connection)
            connection.close()
        }
        return try body(database)
    }

    public func connect(_ applicationName: String = "pushd-tests") throws -> PGConnection {
        try QueueSession.connect(url: url, applicationName: applicationName)
    }

    public static func replacingDatabase(in url: String, with name: String) -> String {
        guard let scheme = url.range(of: "://"),
              let slash = url[scheme.upperBound...].firstIndex(of: "/") else { return url + "/" + name }
        let query = url[slash...].firstIndex(of: "?").map { String(url[$0...]) } ?? ""
        return String(url[..<slash]) + "/" + name + query
    }
}
