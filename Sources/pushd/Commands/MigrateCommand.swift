import QueueStore

/// `pushd migrate`: applies the pending schema migrations (safe to run twice, or from two hosts at once).
enum MigrateCommand {
    static func run(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let connection = try context.connect(parsed, applicationName: "pushd-migrate")
        let migrator = Migrator()
        let applied = try migrator.migrate(connection)
        let version = try migrator.appliedVersions(connection).last ?? 0
        if applied.isEmpty {
            context.output("schema is up to date (version \(version))")
        } else {
            context.output("applied \(applied.map(String.init).joined(separator: ", ")); schema is at version \(version)")
        }
        return 0
    }
}
