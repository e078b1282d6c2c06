import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "version", "--version":
    print(VersionCommand.report())
default:
    print("usage: pushd version")
    exit(arguments.isEmpty ? 0 : 2)
}
