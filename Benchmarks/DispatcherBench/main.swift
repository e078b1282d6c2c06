// Transport-only throughput of the Dispatcher engine against a local HTTP/2 TLS server.
//
// usage: DispatcherBench --port P --ca FILE [--requests 500000] [--threads 2]
//                        [--connections 1] [--streams 100] [--label TEXT] [--path /ok]
//                        [--idle-probe ROUNDS] [--max-connections N] [--coalesce-ms N]
// --coalesce-ms sets answerCoalescingMilliseconds (what pushd's campaign lane uses): with many
// requests in flight and answers trickling in, the loop reads its sockets less often.
// --request-timeout-ms sets requestTimeoutMilliseconds (30,000 by default, as pushd's; 0: none):
// under valgrind, where a request may wait longer than that, a larger one keeps it from failing.
// --max-connections lets the engine open more connections while requests wait for a stream
// (DispatcherConfiguration.maxConnections): for a server answering after a delay.
// --idle-probe measures what closing idle connections costs instead: the latency of one
// request on a warm connection against one sent after the connection idled past
// idleCloseSeconds (1 s here), which opens a new connection.
// --header LINE (repeatable), --payload-file FILE and --device-paths send what the daemon
// sends instead (its authorization, topic and push type headers, and apns-priority when it
// is not 10; its payload; a path /3/device/<64 hex> per request), so the daemon's drain
// compares with the engine and the C reference (same options) on the very same requests
// (Benchmarks/DaemonBench/drain.sh does so).
// Requests are built before timing starts (1,024 distinct ones, sent in turn) so only the
// engine and libcurl are measured. A request may be in flight on several streams at once, as
// the C reference's apns-ids repeat too; the harness's requests count in the engine's peak
// RSS (4,096 of them were 0.7 MB more), so it holds no more than it needs. Prints one line
// of key=value figures; the bench script puts it beside the C reference's line from the
// same run.
import Dispatcher
import Glibc
import Synchronization

struct Options {
    var port = 0
    var ca = ""
    var requests = 500_000
    var threads = 2
    var connections = 1
    var streams = 100
    var label = "dispatcher"
    var path = "/ok"
    var idleProbeRounds = 0
    var maxConnections: Int?
    /// The engine's window; nil keeps its default, twice the streams.
    var maxOutstanding: Int?
    var coalesceMilliseconds = 0
    var requestTimeoutMilliseconds = 30_000
    var oneReader = false
    var headers: [String] = []
    var payloadFile: String?
    var devicePaths = false
}

func parseOptions() -> Options {
    var options = Options()
    var arguments = CommandLine.arguments.dropFirst().makeIterator()
    func fail(_ message: String) -> Never {
        printError("DispatcherBench: \(message)\nusage: DispatcherBench --port P --ca FILE [--requests N] [--threads N] [--connections N] [--streams N] [--label TEXT] [--path PATH] [--max-outstanding N] [--request-timeout-ms N] [--header LINE]... [--payload-file FILE] [--device-paths yes]")
        exit(2)
    }
    while let flag = arguments.next() {
        guard let value = arguments.next() else { fail("\(flag) needs a value") }
        func number() -> Int {
            guard let parsed = Int(value), parsed > 0 else { fail("\(flag) must be a positive whole number, got \"\(value)\"") }
            return parsed
        }
        switch flag {
        case "--port": options.port = number()
        case "--ca": options.ca = value
        case "--requests": options.requests = number()
        case "--threads": options.threads = number()
        case "--connections": options.connections = number()
        case "--streams": options.streams = number()
        case "--label": options.label = value
        case "--path": options.path = value
        case "--idle-probe": options.idleProbeRounds = number()
        case "--max-connections": options.maxConnections = number()
        case "--max-outstanding": options.maxOutstanding = number()
        case "--coalesce-ms": options.coalesceMilliseconds = number()
        case "--request-timeout-ms": options.requestTimeoutMilliseconds = number()
        case "--one-reader":
            guard value == "yes" || value == "no" else { fail("--one-reader takes yes or no") }
            options.oneReader = value == "yes"
        case "--header": options.headers.append(value)
        case "--payload-file": options.payloadFile = value
        case "--device-paths":
            guard value == "yes" else { fail("--device-paths takes yes") }
            options.devicePaths = true
        default: fail("unknown option \(flag)")
        }
    }
    if options.port == 0 || options.ca.isEmpty { fail("--port and --ca are required") }
    return options
}

func printError(_ message: String) {
    var line = message + "\n"
    line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}

func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

func peakRSSKilobytes() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return usage.ru_maxrss
}

func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

let options = parseOptions()
var body = Array(#"{"aps":{"alert":"hello"}}"#.utf8)
if let payloadFile = options.payloadFile {
    guard let file = fopen(payloadFile, "r") else {
        printError("DispatcherBench: cannot read --payload-file \(payloadFile)")
        exit(2)
    }
    body = []
    while case let byte = fgetc(file), byte != EOF { body.append(UInt8(byte)) }
    fclose(file)
}
/// 64 lowercase hex digits, distinct per index, as a device token.
func deviceToken(_ index: Int) -> String {
    let hex = String(UInt64(index) &* 2_654_435_761 &+ 1, radix: 16)
    return String(repeating: "0", count: 64 - hex.count) + hex
}
let prebuilt: [DispatchRequest]
do {
    prebuilt = try (0..<1_024).map { index in
        let path = options.devicePaths ? "/3/device/" + deviceToken(index) : options.path
        let reversedDigits = String(String(index).reversed())
        let headers = options.headers.isEmpty ? [
            "apns-topic: com.example.app",
            "apns-push-type: alert",
            "apns-id: 00000000-0000-0000-0000-" + reversedDigits + String(repeating: "0", count: 12 - reversedDigits.count),
        ] : options.headers
        return try DispatchRequest(path: path, headerLines: headers, body: body)
    }
} catch {
    printError("DispatcherBench: \(error)")
    exit(1)
}

final class Tally: Sendable {
    let ok = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let latencyTotal = Atomic<Int>(0)
}
let tally = Tally()
let dispatcher: HTTP2Dispatcher
do {
    var configuration = DispatcherConfiguration(host: "127.0.0.1", port: options.port, trustedCAFile: options.ca,
                                                threads: options.idleProbeRounds > 0 ? 1 : options.threads,
                                                connectionsPerThread: options.connections,
                                                streamsPerConnection: options.streams,
                                                requestTimeoutMilliseconds: options.requestTimeoutMilliseconds,
                                                idleCloseSeconds: options.idleProbeRounds > 0 ? 1 : 600)
    configuration.maxConnections = options.maxConnections
    configuration.maxOutstanding = options.maxOutstanding
    configuration.answerCoalescingMilliseconds = options.coalesceMilliseconds
    configuration.readsSocketsThroughOneTransfer = options.oneReader
    dispatcher = try HTTP2Dispatcher(
        configuration: configuration,
        onResult: { result in
            if result.response?.status == 200 {
                tally.ok.add(1, ordering: .relaxed)
            } else {
                tally.failed.add(1, ordering: .relaxed)
            }
            tally.latencyTotal.add(Int(result.latencyNanoseconds), ordering: .relaxed)
        })
} catch {
    printError("DispatcherBench: \(error)")
    exit(1)
}

/// Sends `request` alone and returns its latency in milliseconds.
func timedSend(_ request: DispatchRequest, tag: UInt64) -> Double {
    let before = tally.ok.load(ordering: .relaxed) + tally.failed.load(ordering: .relaxed)
    let started = monotonicSeconds()
    dispatcher.submit(request, tag: tag)
    while tally.ok.load(ordering: .relaxed) + tally.failed.load(ordering: .relaxed) == before { usleep(100) }
    return (monotonicSeconds() - started) * 1000
}

if options.idleProbeRounds > 0 {
    _ = timedSend(prebuilt[0], tag: 0)
    var warm: [Double] = []
    var afterIdle: [Double] = []
    for round in 0..<options.idleProbeRounds {
        for index in 0..<20 { warm.append(timedSend(prebuilt[index + 1], tag: UInt64(round * 100 + index + 1))) }
        // libcurl counts idle time in whole seconds and closes above idleCloseSeconds (1).
        usleep(2_200_000)
        afterIdle.append(timedSend(prebuilt[50], tag: UInt64(round * 100 + 50)))
    }
    let statistics = dispatcher.statistics
    dispatcher.shutdown()
    func median(_ values: [Double]) -> String { format2(values.sorted()[values.count / 2]) }
    print("label=\(options.label) warm_median_ms=\(median(warm)) after_idle_median_ms=\(median(afterIdle)) "
          + "rounds=\(options.idleProbeRounds) connections=\(statistics.connectionsOpened) failed=\(tally.failed.load(ordering: .relaxed))")
    exit(tally.failed.load(ordering: .relaxed) == 0 ? 0 : 1)
}

let cpuBefore = cpuSeconds()
let start = monotonicSeconds()
// Submitted in batches, as a sender claiming jobs from its queue would.
var batch: [(request: DispatchRequest, tag: UInt64)] = []
batch.reserveCapacity(256)
for index in 0..<options.requests {
    batch.append((prebuilt[index % prebuilt.count], UInt64(index)))
    if batch.count == 256 || index == options.requests - 1 {
        dispatcher.submit(contentsOf: batch)
        batch.removeAll(keepingCapacity: true)
    }
}
while tally.ok.load(ordering: .relaxed) + tally.failed.load(ordering: .relaxed) < options.requests {
    usleep(1000)
}
let seconds = monotonicSeconds() - start
let cpu = cpuSeconds() - cpuBefore
let done = options.requests
let statistics = dispatcher.statistics
dispatcher.shutdown()
print("label=\(options.label) requests=\(done) ok=\(tally.ok.load(ordering: .relaxed)) seconds=\(format3(seconds)) "
      + "rate=\(Int(Double(done) / seconds)) cpu_us_per_request=\(format2(cpu * 1e6 / Double(done))) "
      + "peak_rss_kb=\(peakRSSKilobytes()) mean_latency_ms=\(format2(Double(tally.latencyTotal.load(ordering: .relaxed)) / Double(done) / 1e6)) "
      + "retried=\(statistics.retried) reads=\(statistics.socketReads) one_reader_reads=\(statistics.socketReadsThroughOneTransfer) connections=\(statistics.connectionsOpened) peak_connections=\(statistics.peakOpenConnections)")
exit(tally.failed.load(ordering: .relaxed) == 0 ? 0 : 1)

func format2(_ value: Double) -> String { String(Double(Int(value * 100)) / 100) }
func format3(_ value: Double) -> String { String(Double(Int(value * 1000)) / 1000) }
