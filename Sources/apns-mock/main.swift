import APNsMock
import Dispatch
import Glibc
import Posix

/// Writes a line unbuffered, so a script waiting for "listening" sees it at once.
func say(_ line: String) {
    StandardStreams.writeOutput(line + "\n")
}

/// Runs until SIGINT or SIGTERM; SIGHUP reloads the faults file. Signals are routed before
/// the "listening" line is printed, so a script may signal as soon as it sees it.
func serve(_ configuration: MockConfiguration, faultsFile: String?) throws {
    let server = try APNsMockServer(configuration: configuration)
    for signalNumber in [SIGINT, SIGTERM, SIGHUP] { signal(signalNumber, SIG_IGN) }
    let queue = DispatchQueue(label: "apns-mock.signals")
    let done = DispatchSemaphore(value: 0)
    var sources: [DispatchSourceSignal] = []
    for signalNumber in [SIGINT, SIGTERM] {
        let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
        source.setEventHandler { done.signal() }
        source.resume()
        sources.append(source)
    }
    let reload = DispatchSource.makeSignalSource(signal: SIGHUP, queue: queue)
    reload.setEventHandler {
        guard let faultsFile else { return }
        do {
            try server.setFaults(MockCommandLine.loadFaults(faultsFile))
            say("apns-mock: reloaded faults from \(faultsFile)")
        } catch {
            say("apns-mock: kept the previous faults: \(error)")
        }
    }
    reload.resume()
    sources.append(reload)

    let port = try server.start()
    var line = "apns-mock listening on \(configuration.host):\(port) (nghttp2 \(HTTP2Library.version))"
    if let channels = server.channelManagementPort { line += ", channel management on \(configuration.host):\(channels)" }
    if let control = server.controlPort { line += ", control on 127.0.0.1:\(control)" }
    say(line)
    done.wait()
    server.stop()
    say(server.metricsText)
    for source in sources { source.cancel() }
}

do {
    switch try MockCommandLine.parse(Array(CommandLine.arguments.dropFirst())) {
    case .help:
        print(MockCommandLine.usage)
    case .generateCertificates(let directory):
        let files = try CertificateGenerator.generate(into: directory)
        print("wrote \(files.caCertificate), \(files.serverCertificate), \(files.serverKey), \(files.clientCertificate), \(files.clientKey)")
    case .serve(let configuration, let faultsFile):
        try serve(configuration, faultsFile: faultsFile)
    }
} catch {
    StandardStreams.writeError("apns-mock: \(error)\n")
    exit(2)
}
