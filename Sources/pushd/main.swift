import Foundation

let context = CommandContext()
let exitCode: Int32
do {
    let parsed = try ArgumentParser.parse(Array(CommandLine.arguments.dropFirst()), root: Commands.root)
    switch parsed.path.dropFirst().joined(separator: " ") {
    case "version": context.output(VersionCommand.report()); exitCode = 0
    case "migrate": exitCode = try MigrateCommand.run(parsed, context)
    case "check-config": exitCode = try CheckConfigCommand.run(parsed, context)
    case let other: throw CommandContext.Failure("'\(other)' is not available in this build")
    }
} catch let help as HelpRequest {
    context.output(help.text)
    exitCode = 0
} catch let usage as UsageError {
    context.errorOutput(usage.description)
    exitCode = 2
} catch {
    context.errorOutput("pushd: \(error)")
    exitCode = 1
}
exit(exitCode)
