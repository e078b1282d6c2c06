internal import CCurl
import Posix
import Glibc

/// One pooled easy handle with the buffers libcurl reads from and writes into while it runs.
/// Its options that never change are set once at creation and kept across reuse.
///
/// Thread rule: touched only on its event loop's thread (libcurl calls back on that thread).
final class CurlTransfer {
    // Declared in this order so that the small fields fill the gaps the larger ones leave:
    // an object of 200 bytes (a 208-byte malloc block instead of 240), one per stream in flight.
    let index: Int
    let easy: UnsafeMutableRawPointer
    let url: OpaquePointer
    /// This transfer's buffer in its loop's `CurlErrorBuffers`; libcurl holds it only while
    /// the transfer is added (see `attachErrorBuffer`).
    let errorBuffer: UnsafeMutablePointer<CChar>
    /// The header list libcurl has now (a request's own nodes, which it reads in place);
    /// `.none` when unknown after a refused option.
    private var attachedHeaders: UnsafeMutablePointer<curl_slist>?? = .some(nil)
    private var errorBufferAttached = false
    private var method: DispatchRequest.Method = .post
    private(set) var freshConnect = false
    /// libcurl wanted a new connection to send this request again and the loop refused it
    /// during a reconnect backoff: the transfer ends as a connect failure that is none.
    var heldBack = false
    /// OpenSSL wrote this attempt's client certificate in a TLS handshake of a connection it
    /// opened (`curlHandshakeMessageCallback`; watched for certificate credentials only).
    var sentClientCertificate = false
    /// Local port of the connection the latest send went on (from libcurl's pre-request callback).
    var localPort: Int32 = 0
    /// Which of its loop's credentials the handle was given (`CurlEventLoop.credentialGeneration`);
    /// -1 after libcurl refused one.
    var credentialGeneration: Int32 = 0
    /// The event loop that owns this transfer (it outlives it): the pre-request callback tells
    /// it which connections carry requests, that is, which were established.
    var loop: UnsafeMutableRawPointer?
    var pending: PendingRequest?
    /// When the loop put this attempt into libcurl: its answer's round trip feeds `AnswerCoalescing`.
    var enteredCurlAt: UInt64 = 0
    var responseBody: [UInt8] = []
    var apnsID: APNsID?
    /// The `apns-unique-id` response header, which only APNs's development environment sends:
    /// the id to look the notification up by in Apple's delivery log.
    var uniqueID: APNsID?
    private var sendCount: Int32 = 0
    /// The `apns-channel-id` response header (a created channel's id, from the channel API).
    var channelID: String?
    /// From the status line, so the body of a success is never copied.
    var status = 0
    /// libcurl's id of the connection the latest send of this attempt went on, and of the first.
    var connectionID: Int64 = -1
    var firstConnectionID: Int64 = -1

    /// A GET's success body is the answer (a channel read or list); a POST's is not kept.
    var keepsSuccessBody: Bool { method == .get }
    /// Times libcurl began sending this attempt; above one, it resent the request by itself.
    var sends: Int {
        get { Int(sendCount) }
        set { sendCount = Int32(clamping: newValue) }
    }

    init(index: Int, easy: UnsafeMutableRawPointer, url: OpaquePointer, errorBuffer: UnsafeMutablePointer<CChar>) {
        self.index = index
        self.easy = easy
        self.url = url
        self.errorBuffer = errorBuffer
    }

    deinit {
        curl_easy_cleanup(easy)
        curl_url_cleanup(url)
    }

    /// Gives libcurl the error buffer once the transfer is added: `curl_multi_add_handle`
    /// clears the first byte of an attached buffer, which would make every transfer's page
    /// resident. Nothing can fail between the add and this call (the transfer runs only in
    /// the loop's next `curl_multi_socket_action`), so no message is lost. Returns false
    /// when libcurl refused it; the transfer then reports failures by their code's text.
    @discardableResult
    func attachErrorBuffer() -> Bool {
        errorBufferAttached = pushd_curl_easy_setopt_ptr(easy, CURLOPT_ERRORBUFFER, errorBuffer) == CURLE_OK
        return errorBufferAttached
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
        if errorBufferAttached {
            check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_ERRORBUFFER, nil), "CURLOPT_ERRORBUFFER")
            errorBufferAttached = false
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
        // Read before written: an untouched buffer stays out of memory.
        if errorBuffer[0] != 0 { errorBuffer[0] = 0 }
        apnsID = nil
        uniqueID = nil
        channelID = nil
        status = 0
        sends = 0
        heldBack = false
        sentClientCertificate = false
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
