import Foundation

/// Frames seen by nghttp's verbose client, which prints every SETTINGS and GOAWAY received.
struct NghttpTrace {
    var output: String

    /// MAX_CONCURRENT_STREAMS values of the SETTINGS frames received, in order.
    var maxConcurrentStreamsReceived: [Int] {
        var values: [Int] = []
        var inReceivedSettings = false
        for line in output.split(separator: "\n") {
            if line.contains("recv SETTINGS frame") { inReceivedSettings = true; continue }
            if line.contains(" frame ") { inReceivedSettings = false }
            if inReceivedSettings, let range = line.range(of: "SETTINGS_MAX_CONCURRENT_STREAMS(0x03):") {
                values.append(Int(line[range.upperBound...].trimmingCharacters(in: CharacterSet(charactersIn: " ]"))) ?? -1)
            }
        }
        return values
    }
}

/// Sends one POST per token on one connection with the `nghttp` client.
func runNghttp(port: UInt16, tokens: [String], headers: [String] = ["apns-topic: com.example.app"]) throws -> NghttpTrace {
    let payload = NSTemporaryDirectory() + "apns-mock-payload-\(UUID().uuidString).json"
    try Data(examplePayload).write(to: URL(fileURLWithPath: payload))
    defer { try? FileManager.default.removeItem(atPath: payload) }
    var arguments = ["-nv", "--no-dep", "-d", payload, "-m", "1"]
    for header in headers { arguments += ["-H", header] }
    // All tokens go as URIs of one run: the mock's concurrency state is per connection.
    arguments += tokens.map { "https://127.0.0.1:\(port)/3/device/\($0)" }
    return NghttpTrace(output: try runProcess("/usr/bin/nghttp", arguments).output)
}
