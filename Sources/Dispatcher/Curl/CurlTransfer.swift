internal import CCurl
import Posix
import Glibc

/// One pooled easy handle with the buffers libcurl reads from and writes into while it runs.
/// Its options that never change are set once at creation and kept across reuse.
///
/// Thread rule: touched only on its event loop's thread (libcurl calls back on that thread).
final class CurlTransfer {
    let index: Int
    let easy: UnsafeMutableRawPointer
    let url: OpaquePointer
    /// The header list libcurl has now (a request's own nodes, which it reads in place);
    /// `.none` when unknown after a refused option.
    private var attachedHeaders: UnsafeMutablePointer<curl_slist>?? = .some(nil)
    let errorBuffer: UnsafeMutablePointer<CChar>
    private var method: DispatchRequest.Method = .post
    private(set) var freshConnect = false
    var pending: PendingRequest?
    /// When the loop put this attempt into libcurl: its answer's round trip feeds `AnswerCoalescing`.
    var enteredCurlAt: UInt64 = 0
    var responseBody: [UInt8] = []
    var apnsID: APNsID?
    /// The `apns-channel-id` response header (a created channel's id, from the channel API).
    var channelID: String?
    /// A GET's success body is the answer (a channel read or list); a POST's is not kept.
    var keepsSuccessBody: Bool { method == .get }
    /// From the status line, so the body of a success is never copied.
    var status = 0
    /// Times libcurl began sending this attempt; above one, it resent the request by itself.
    var sends = 0
    /// libcurl's id of the connection the latest send of this attempt went on, and of the first.
    var connectionID: Int64 = -1
    var firstConnectionID: Int64 = -1
    /// Local port of that connection (from libcurl's pre-request callback).
    var localPort: Int32 = 0

    init(index: Int, easy: UnsafeMutableRawPointer, url: OpaquePointer) {
        self.index = index
        self.easy = easy
        self.url = url
        errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(pushd_curl_max_errorsize()))
        errorBuffer.initialize(repeating: 0, count: Int(pushd_curl_max_errorsize()))
    }

    deinit {
        curl_easy_cleanup(easy)
        curl_url_cleanup(url)
        errorBuffer.deallocate()
    }

    /// The libcurl message of a failed transfer: the error buffer's detail, else the code's text.
    func failureMessage(_ code: CURLcode) -> String {
        errorBuffer[0] != 0 ? String(cString: errorBuffer) : String(cString: curl_easy_strerror(code))
    }

    /// Points libcurl at `request`'s bytes, which it reads in place (the caller keeps the
    /// request in `pending` until the transfer is done); `fresh` makes it open a new
    /// connection instead of reusing one. Per-request options are only set when they differ
    /// from the previous request's, and each one's result is checked.
    func prepare(for request: DispatchRequest, fresh: Bool) -> TransportError? {
        var failure: CurlOptionFailure?
        func check(_ code: CURLcode, _ option: String) {
            if code != CURLE_OK, failure == nil { failure = CurlOptionFailure(code: code, option: option) }
        }
        // The path is the request target; the handle's URL keeps "/" and only names the host.
        // Setting the path into the URL instead cost about 15,500 instructions per request in
        // libcurl (the URL taken apart and put together again, the path re-encoded byte by
        // byte; docs/dispatcher.md). `DispatchRequest` checked the path when it was made.
        check(pushd_curl_easy_setopt_string(easy, CURLOPT_REQUEST_TARGET, request.bytes.pathPointer), "CURLOPT_REQUEST_TARGET")
        let headers = request.headersAndBody.headerList
        if attachedHeaders != .some(headers) {
            check(pushd_curl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, headers), "CURLOPT_HTTPHEADER")
            attachedHeaders = headers
        }
        if request.method != method {
            switch request.method {
            case .post:
                check(pushd_curl_easy_setopt_long(easy, CURLOPT_POST, 1), "CURLOPT_POST")
                check(pushd_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, nil), "CURLOPT_CUSTOMREQUEST")
            case .get:
                check(pushd_curl_easy_setopt_long(easy, CURLOPT_HTTPGET, 1), "CURLOPT_HTTPGET")
                check(pushd_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, nil), "CURLOPT_CUSTOMREQUEST")
            case .put, .delete:
                check(pushd_curl_easy_setopt_long(easy, CURLOPT_POST, 1), "CURLOPT_POST")
                check(pushd_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, request.method.rawValue), "CURLOPT_CUSTOMREQUEST")
            }
            method = request.method
        }
        if request.method != .get {
            let body = request.headersAndBody
            check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_POSTFIELDS, body.bodyPointer), "CURLOPT_POSTFIELDS")
            check(pushd_curl_easy_setopt_long(easy, CURLOPT_POSTFIELDSIZE, body.bodyCount), "CURLOPT_POSTFIELDSIZE")
        }
        if fresh != freshConnect {
            check(pushd_curl_easy_setopt_long(easy, CURLOPT_FRESH_CONNECT, fresh ? 1 : 0), "CURLOPT_FRESH_CONNECT")
            freshConnect = fresh
        }
        if let failure {
            // The handle's state is unknown now: the next request sets everything again.
            method = request.method == .get ? .post : .get
            attachedHeaders = .none
            return failure.transportError
        }
        errorBuffer[0] = 0
        apnsID = nil
        channelID = nil
        status = 0
        sends = 0
        connectionID = -1
        firstConnectionID = -1
        return nil
    }
}

/// A per-request option libcurl refused; reported as the request's transport failure.
struct CurlOptionFailure {
    let code: CURLcode
    let option: String

    var transportError: TransportError {
        TransportError(code: Int(code.rawValue), message: "\(option) rejected: \(String(cString: curl_easy_strerror(code)))")
    }
}
