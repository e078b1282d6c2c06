import Posix
import Glibc

let context = CommandContext()
let exitCode: Int32
do {
    let parsed = try ArgumentParser.parse(Array(CommandLine.arguments.dropFirst()), root: Commands.root)
    switch parsed.path.dropFirst().joined(separator: " ") {
    case "version": context.output(VersionCommand.report()); exitCode = 0
    case "migrate": exitCode = try MigrateCommand.run(parsed, context)
    case "check-config": exitCode = try CheckConfigCommand.run(parsed, context)
    case "campaign create": exitCode = try CampaignCommand.create(parsed, context)
    case "campaign import": exitCode = try CampaignCommand.importTargets(parsed, context)
    case "campaign start": exitCode = try CampaignCommand.start(parsed, context)
    case "campaign pause": exitCode = try CampaignCommand.pause(parsed, context)
    case "campaign resume": exitCode = try CampaignCommand.resume(parsed, context)
    case "campaign cancel": exitCode = try CampaignCommand.cancel(parsed, context)
    case "campaign status": exitCode = try CampaignCommand.status(parsed, context)
    case "campaign list": exitCode = try CampaignCommand.list(parsed, context)
    case "tokens prune-stats": exitCode = try TokensCommand.pruneStats(parsed, context)
    case "channels create": exitCode = try ChannelsCommand.create(parsed, context)
    case "channels list": exitCode = try ChannelsCommand.list(parsed, context)
    case "channels delete": exitCode = try ChannelsCommand.delete(parsed, context)
    case "channels audit": exitCode = ChannelAuditCommand.run(parsed, context)
    case "send": exitCode = try SendCommand.run(parsed, context)
    case "status": exitCode = try StatusCommand.run(parsed, context)
    case "run": exitCode = try RunCommand.run(parsed, context)
    case "demo": exitCode = try DemoCommand.run(parsed, context)
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
