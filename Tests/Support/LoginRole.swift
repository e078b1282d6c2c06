import Foundation
import QueueStore

/// A login role of the throwaway server that is a member of one of pushd's group roles,
/// for tests that act as an application, the daemon or a dashboard. Roles belong to the
/// whole server, so each gets a name of its own and is dropped when the test ends.
public struct LoginRole: Sendable {
    public let name: String
    /// The database's URL with this role as the user (the server trusts local users).
    public let url: String

    public static func with<T>(memberOf group: String, in database: IsolatedDatabase,
                               _ body: (LoginRole) throws -> T) throws -> T {
        let name = TestDatabase.uniqueName("pushd_login")
        let admin = try database.connect("pushd-tests-roles")
        defer { admin.close() }
        try admin.execute(script: "CREATE ROLE \(name) LOGIN IN ROLE \(group)")
        defer { _ = try? admin.execute(script: "DROP ROLE IF EXISTS \(name)") }
        guard let scheme = database.url.range(of: "://"), let at = database.url[scheme.upperBound...].firstIndex(of: "@") else {
            throw PGError(code: .clientEncoding, message: "the test database URL names no user: \(PGConnection.redacted(database.url))")
        }
        let url = String(database.url[..<scheme.upperBound]) + name + String(database.url[at...])
        return try body(LoginRole(name: name, url: url))
    }

    public func connect() throws -> PGConnection {
        try PGConnection(url: url, applicationName: "pushd-tests-\(name)")
    }
}
