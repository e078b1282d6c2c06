import Foundation
import QueueStore

/// A database of its own for one test, created on the throwaway server and migrated.
/// The schema name `pushd` is fixed, so isolation between parallel tests is per database.
struct IsolatedDatabase {
    let name: String
    let url: String

    /// Creates `pushd_t_<random>`, runs `body`, and drops the database whatever happens.
    static func with<T>(migrated: Bool = true, _ body: (IsolatedDatabase) throws -> T) throws -> T {
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

    func connect(_ applicationName: String = "pushd-tests") throws -> PGConnection {
        try QueueSession.connect(url: url, applicationName: applicationName)
    }

    static func replacingDatabase(in url: String, with name: String) -> String {
        guard let scheme = url.range(of: "://"),
              let slash = url[scheme.upperBound...].firstIndex(of: "/") else { return url + "/" + name }
        let query = url[slash...].firstIndex(of: "?").map { String(url[$0...]) } ?? ""
        return String(url[..<slash]) + "/" + name + query
    }
}

enum Fixtures {
    static func token(_ seed: Int) -> String {
        var text = String(seed, radix: 16)
        text = String(repeating: "0", count: max(0, 16 - text.count)) + text
        return String(repeating: text, count: 4)
    }

    static let payload = #"{"aps":{"alert":{"title":"Shipped","body":"Order 1042 is on its way"}}}"#

    /// The error `body` throws as a `PGError`, or nil (recorded as an issue by the caller).
    static func pgError(_ body: () throws -> Void) -> PGError? {
        do {
            try body()
            return nil
        } catch let error as PGError {
            return error
        } catch {
            return PGError(code: .clientEncoding, message: "not a PGError: \(error)")
        }
    }

    static func queueError(_ body: () throws -> Void) -> QueueError? {
        do {
            try body()
            return nil
        } catch let error as QueueError {
            return error
        } catch {
            return QueueError("not a QueueError: \(error)")
        }
    }
}
