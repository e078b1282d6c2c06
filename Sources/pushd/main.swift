import Glibc
import QueueStore

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "version", "--version":
    print(VersionCommand.report())
case "migrate":
    exit(MigrateCommand.run(Array(arguments.dropFirst())))
default:
    print("usage: pushd version | pushd migrate [--database-url URL]")
    exit(arguments.isEmpty ? 0 : 2)
}

/// `pushd migrate [--database-url URL]`: applies the pending schema migrations.
enum MigrateCommand {
    static func run(_ arguments: [String]) -> Int32 {
        var url = getenv("PUSHD_DATABASE_URL").map { String(cString: $0) }
        var index = 0
        while index < arguments.count {
            switch arguments[index] {
            case "--database-url":
                guard index + 1 < arguments.count else {
                    printError("pushd migrate: --database-url needs a value\n")
                    return 2
                }
                url = arguments[index + 1]
                index += 2
            case "--help", "-h":
                print("usage: pushd migrate [--database-url URL]\n  applies pushd's schema migrations; the URL defaults to $PUSHD_DATABASE_URL")
                return 0
            default:
                printError("pushd migrate: unknown argument '\(arguments[index])'\n")
                return 2
            }
        }
        guard let url, !url.isEmpty else {
            printError("pushd migrate: no database: pass --database-url or set PUSHD_DATABASE_URL\n")
            return 2
        }
        do {
            let connection = try QueueSession.connect(url: url, applicationName: "pushd-migrate")
            let migrator = Migrator()
            let applied = try migrator.migrate(connection)
            let versions = try migrator.appliedVersions(connection)
            if applied.isEmpty {
                print("pushd migrate: schema is up to date (version \(versions.last ?? 0))")
            } else {
                print("pushd migrate: applied \(applied.map(String.init).joined(separator: ", ")); schema is at version \(versions.last ?? 0)")
            }
            return 0
        } catch {
            printError("pushd migrate: \(error)\n")
            return 1
        }
    }
}

private func printError(_ message: String) {
    var bytes = Array(message.utf8)
    bytes.withUnsafeMutableBytes { _ = write(2, $0.baseAddress, $0.count) }
}
