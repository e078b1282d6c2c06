import APNs
import CCurl
import Foundation

/// One request for `H2Client`.
struct TestRequest {
    var method = "POST"
    var path: String
    var headers: [String] = []
    var body: [UInt8]? = examplePayload

    static func push(token: String, topic: String = "com.example.app", headers: [String] = [], body: [UInt8]? = examplePayload) -> TestRequest {
        TestRequest(path: "/3/device/\(token)", headers: ["apns-topic: \(topic)"] + headers, body: body)
    }
}

/// What came back for one request.
struct TestResponse {
    var status: Int
    var headers: [String: String]
    var body: String
    /// libcurl's result; nonzero means a transport error (reset, refused…).
    var curlCode: Int
    var httpVersion: Int

    var apnsID: String? { headers["apns-id"] }

    /// The JSON body as a dictionary.
    var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:]
    }
    var reason: String? { json["reason"] as? String }
}

/// Drives libcurl's multi interface over HTTP/2 with TLS verification against the test CA,
/// multiplexing every request onto as few connections as allowed.
enum H2Client {
    private static let initialized: Bool = {
        OpenSSLRuntime.initialize()
        return curl_global_init(pushd_curl_global_all()) == CURLE_OK
    }()

    private final class Transfer {
        var status = 0
        var headers: [String: String] = [:]
        var body: [UInt8] = []
        var curlCode = 0
        var httpVersion = 0
        var headerList: UnsafeMutablePointer<curl_slist>?
    }

    struct Options {
        var maxConnections = 1
        var clientCertificate: (certificate: String, key: String)?
        var timeoutMilliseconds = 20_000
    }

    static func send(_ requests: [TestRequest], port: UInt16, options: Options = Options()) throws -> [TestResponse] {
        precondition(initialized, "curl_global_init failed")
        let files = try TestCertificates.files()
        guard let multi = curl_multi_init() else { throw CocoaError(.featureUnsupported) }
        defer { curl_multi_cleanup(multi) }
        _ = pushd_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, pushd_curl_pipe_multiplex())
        _ = pushd_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, options.maxConnections)

        var transfers: [Transfer] = []
        var handles: [UnsafeMutableRawPointer] = []
        for request in requests {
            let transfer = Transfer()
            transfers.append(transfer)
            guard let easy = curl_easy_init() else { throw CocoaError(.featureUnsupported) }
            handles.append(easy)
            let box = Unmanaged.passUnretained(transfer).toOpaque()
            _ = pushd_curl_easy_setopt_string(easy, CURLOPT_URL, "https://localhost:\(port)\(request.path)")
            _ = pushd_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, pushd_curl_http_version_2tls())
            _ = pushd_curl_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1)
            _ = pushd_curl_easy_setopt_string(easy, CURLOPT_CAINFO, files.caCertificate)
            _ = pushd_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, options.timeoutMilliseconds)
            _ = pushd_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, request.method)
            if let client = options.clientCertificate {
                _ = pushd_curl_easy_setopt_string(easy, CURLOPT_SSLCERT, client.certificate)
                _ = pushd_curl_easy_setopt_string(easy, CURLOPT_SSLKEY, client.key)
            }
            if let body = request.body {
                _ = pushd_curl_easy_setopt_long(easy, CURLOPT_POSTFIELDSIZE, body.count)
                var bytes = body
                _ = bytes.withUnsafeMutableBytes { pushd_curl_easy_setopt_ptr(easy, CURLOPT_COPYPOSTFIELDS, $0.baseAddress) }
            }
            for header in request.headers + ["expect:"] {
                transfer.headerList = curl_slist_append(transfer.headerList, header)
            }
            _ = pushd_curl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, transfer.headerList)
            _ = pushd_curl_easy_setopt_data_cb(easy, CURLOPT_WRITEFUNCTION, { data, size, count, user in
                let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
                let length = size * count
                data!.withMemoryRebound(to: UInt8.self, capacity: length) {
                    transfer.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
                }
                return length
            })
            _ = pushd_curl_easy_setopt_ptr(easy, CURLOPT_WRITEDATA, box)
            _ = pushd_curl_easy_setopt_data_cb(easy, CURLOPT_HEADERFUNCTION, { data, size, count, user in
                let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
                let length = size * count
                let line = data!.withMemoryRebound(to: UInt8.self, capacity: length) {
                    String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
                }
                let parts = line.split(separator: ":", maxSplits: 1)
                if parts.count == 2 {
                    transfer.headers[parts[0].lowercased()] = parts[1].trimmingCharacters(in: .whitespacesAndNewlines)
                }
                return length
            })
            _ = pushd_curl_easy_setopt_ptr(easy, CURLOPT_HEADERDATA, box)
            curl_multi_add_handle(multi, easy)
        }
        var running: Int32 = 1
        while running > 0 {
            curl_multi_perform(multi, &running)
            if running > 0 { curl_multi_poll(multi, nil, 0, 200, nil) }
        }
        var remaining: Int32 = 0
        while let message = curl_multi_info_read(multi, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle,
                  let index = handles.firstIndex(of: easy) else { continue }
            transfers[index].curlCode = Int(message.pointee.data.result.rawValue)
        }
        var responses: [TestResponse] = []
        for (index, easy) in handles.enumerated() {
            var status = 0
            var version = 0
            _ = pushd_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
            _ = pushd_curl_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
            let transfer = transfers[index]
            responses.append(TestResponse(
                status: status, headers: transfer.headers, body: String(decoding: transfer.body, as: UTF8.self),
                curlCode: transfer.curlCode, httpVersion: version))
            curl_multi_remove_handle(multi, easy)
            curl_easy_cleanup(easy)
            curl_slist_free_all(transfer.headerList)
        }
        return responses
    }

    static func send(_ request: TestRequest, port: UInt16, options: Options = Options()) throws -> TestResponse {
        try send([request], port: port, options: options)[0]
    }
}
