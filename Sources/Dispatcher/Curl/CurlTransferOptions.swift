import APNs
internal import CCurl
import Glibc

extension CurlTransfer {
    /// A new easy handle with every option that stays the same for all requests; a rejected
    /// option fails here, at start-up or when the pool grows, never on a request.
    /// `socketOwner` receives the open/close-socket callbacks (opening through the transfer,
    /// which names the request a connection is opened for); `errorBuffer` is the transfer's
    /// `CURLOPT_ERRORBUFFER`, attached while it runs.
    /// `credential` is the loop's current one (`generation` names it), which a replaced
    /// certificate makes differ from the configuration's.
    static func make(index: Int, configuration config: DispatcherConfiguration, credential: ClientCredential, generation: Int32,
                     socketOwner: UnsafeMutableRawPointer,
                     errorBuffer: UnsafeMutablePointer<CChar>) throws(DispatcherConfigurationError) -> CurlTransfer {
        guard let easy = curl_easy_init(), let url = curl_url() else {
            throw .transportRejected(setting: "curl_easy_init", message: "out of memory")
        }
        let transfer = CurlTransfer(index: index, easy: easy, url: url, errorBuffer: errorBuffer)
        transfer.loop = socketOwner
        let urlCode = curl_url_set(url, CURLUPART_URL, "https://\(hostForURL(config.host)):\(config.port)/", 0)
        if urlCode != CURLUE_OK {
            throw .invalid(field: "host", value: config.host, expected: "a valid host (\(String(cString: curl_url_strerror(urlCode))))")
        }
        var failure: DispatcherConfigurationError?
        func check(_ code: CURLcode, _ setting: String) {
            if code != CURLE_OK, failure == nil {
                failure = .transportRejected(setting: setting, message: String(cString: curl_easy_strerror(code)))
            }
        }
        let transferPointer = Unmanaged.passUnretained(transfer).toOpaque()
        check(pushd_curl_easy_setopt_url(easy, url), "CURLOPT_CURLU")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_PRIVATE, UnsafeMutableRawPointer(bitPattern: index + 1)), "CURLOPT_PRIVATE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, pushd_curl_http_version_2tls()), "CURLOPT_HTTP_VERSION")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1), "CURLOPT_PIPEWAIT")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1), "CURLOPT_NOSIGNAL")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TCP_NODELAY, 1), "CURLOPT_TCP_NODELAY")
        // APNs answers in well under a kilobyte and a payload is at most 5 KB. The download
        // buffer is lent by the multi handle to the transfer being served (at 2 × 1,000 streams
        // peak RSS was the same with libcurl's defaults and with 1 KB: docs/dispatcher-measurements.md,
        // Memory per stream). The upload buffer belongs to each easy handle and is kept between its
        // transfers; 16 KB is libcurl's minimum, and only its written pages become resident.
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, 4096), "CURLOPT_BUFFERSIZE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_UPLOAD_BUFFERSIZE, 16384), "CURLOPT_UPLOAD_BUFFERSIZE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1), "CURLOPT_SSL_VERIFYPEER")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2), "CURLOPT_SSL_VERIFYHOST")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_POST, 1), "CURLOPT_POST")
        check(pushd_curl_easy_setopt_data_cb(easy, CURLOPT_WRITEFUNCTION, curlWriteCallback), "CURLOPT_WRITEFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_WRITEDATA, transferPointer), "CURLOPT_WRITEDATA")
        check(pushd_curl_easy_setopt_data_cb(easy, CURLOPT_HEADERFUNCTION, curlHeaderCallback), "CURLOPT_HEADERFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_HEADERDATA, transferPointer), "CURLOPT_HEADERDATA")
        check(pushd_curl_easy_setopt_prereq_cb(easy, curlPrereqCallback), "CURLOPT_PREREQFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_PREREQDATA, transferPointer), "CURLOPT_PREREQDATA")
        check(pushd_curl_easy_setopt_opensocket_cb(easy, curlOpenSocketCallback), "CURLOPT_OPENSOCKETFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_OPENSOCKETDATA, transferPointer), "CURLOPT_OPENSOCKETDATA")
        check(pushd_curl_easy_setopt_closesocket_cb(easy, curlCloseSocketCallback), "CURLOPT_CLOSESOCKETFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_CLOSESOCKETDATA, socketOwner), "CURLOPT_CLOSESOCKETDATA")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, config.connectTimeoutMilliseconds), "CURLOPT_CONNECTTIMEOUT_MS")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, config.requestTimeoutMilliseconds), "CURLOPT_TIMEOUT_MS")
        // libcurl sends HTTP/2 PINGs only from curl_easy_upkeep, which reaches a multi
        // handle's connections only through a transfer running on the multi, never the idle
        // connections a PING is for (docs/dispatcher.md). TCP keep-alive probes an idle
        // connection instead: after `keepAliveInterval` idle, every third of
        // `keepAliveTimeout`, three probes, so a dead path is found about `keepAliveTimeout`
        // later and libcurl's liveness check before reuse sees the socket closed.
        let idleSeconds = max(1, config.keepAliveIntervalMilliseconds / 1000)
        let probeSeconds = max(1, config.keepAliveTimeoutMilliseconds / 3000)
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TCP_KEEPALIVE, 1), "CURLOPT_TCP_KEEPALIVE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TCP_KEEPIDLE, idleSeconds), "CURLOPT_TCP_KEEPIDLE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TCP_KEEPINTVL, probeSeconds), "CURLOPT_TCP_KEEPINTVL")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TCP_KEEPCNT, 3), "CURLOPT_TCP_KEEPCNT")
        // A connection idle this long is closed instead of reused: libcurl checks before
        // every reuse, and the request that finds it too old opens a new one. 0: kept.
        let idleClose = config.idleCloseSeconds == 0 ? DispatcherConfiguration.keptIdleSeconds : config.idleCloseSeconds
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_MAXAGE_CONN, idleClose), "CURLOPT_MAXAGE_CONN")
        if let ca = config.trustedCAFile { check(pushd_curl_easy_setopt_string(easy, CURLOPT_CAINFO, ca), "CURLOPT_CAINFO") }
        // Without both options set, libcurl reads no_proxy, NO_PROXY, https_proxy, HTTPS_PROXY,
        // all_proxy and ALL_PROXY for every transfer (about 1,800 instructions of `getenv` per
        // request, docs/dispatcher.md). They are read here once instead, with libcurl's
        // precedence, so operators' proxy variables still apply; "" means none.
        let environment = EnvironmentProxy.read()
        check(pushd_curl_easy_setopt_string(easy, CURLOPT_PROXY, config.proxy ?? environment.proxy ?? ""), "CURLOPT_PROXY")
        check(pushd_curl_easy_setopt_string(easy, CURLOPT_NOPROXY, environment.noProxy ?? ""), "CURLOPT_NOPROXY")
        if let proxyCA = config.proxyCAFile { check(pushd_curl_easy_setopt_string(easy, CURLOPT_PROXY_CAINFO, proxyCA), "CURLOPT_PROXY_CAINFO") }
        if case .certificate = credential {
            // The engine learns whether a handshake got as far as sending the certificate
            // (`CurlTransfer.sentClientCertificate`). The callback's data is the loop, the same
            // for all its handles, so libcurl keeps sharing TLS sessions among them.
            check(pushd_curl_easy_setopt_ssl_ctx_cb(easy, curlSSLContextCallback), "CURLOPT_SSL_CTX_FUNCTION")
            check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_SSL_CTX_DATA, socketOwner), "CURLOPT_SSL_CTX_DATA")
        }
        if failure == nil, let rejected = transfer.use(credential, generation: generation) {
            failure = .transportRejected(setting: rejected.option, message: String(cString: curl_easy_strerror(rejected.code)))
        }
        if let failure { throw failure }
        return transfer
    }

    /// Gives libcurl the client certificate and key from memory (`CURLOPT_SSLCERT_BLOB`,
    /// `CURLOPT_SSLKEY_BLOB`, copied by libcurl): never a file name, which libcurl would read
    /// again for every new connection. libcurl keeps a connection or a TLS session for another
    /// transfer only when that transfer's certificate blob is the same (`match_ssl_primary_config`
    /// and the session cache key, lib/vtls at tag curl-8_14_1), so one made with a replaced
    /// certificate is never used with the new one. Token auth sets nothing. Returns the option
    /// libcurl refused, if any.
    func use(_ credential: ClientCredential, generation: Int32) -> CurlOptionFailure? {
        credentialGeneration = generation
        guard case .certificate(let identity) = credential else { return nil }
        var failure: CurlOptionFailure?
        func check(_ code: CURLcode, _ option: String) {
            if code != CURLE_OK, failure == nil { failure = CurlOptionFailure(code: code, option: option) }
        }
        check(pushd_curl_easy_setopt_string(easy, CURLOPT_SSLCERTTYPE, "PEM"), "CURLOPT_SSLCERTTYPE")
        identity.certificateChainPEM.withUnsafeBytes { bytes in
            check(pushd_curl_easy_setopt_blob(easy, CURLOPT_SSLCERT_BLOB, bytes.baseAddress, bytes.count), "CURLOPT_SSLCERT_BLOB")
        }
        check(pushd_curl_easy_setopt_string(easy, CURLOPT_SSLKEYTYPE, "PEM"), "CURLOPT_SSLKEYTYPE")
        identity.privateKeyPEM.withUnsafeBytes { bytes in
            check(pushd_curl_easy_setopt_blob(easy, CURLOPT_SSLKEY_BLOB, bytes.baseAddress, bytes.count), "CURLOPT_SSLKEY_BLOB")
        }
        // A handle that could not take the new one must not go out with the old one.
        if failure != nil { credentialGeneration = -1 }
        return failure
    }

    /// The proxy settings libcurl would take from the environment for an https:// URL: the
    /// first of https_proxy, HTTPS_PROXY, all_proxy, ALL_PROXY, and no_proxy or NO_PROXY;
    /// an empty variable counts as unset, as libcurl's `curl_getenv` treats it.
    struct EnvironmentProxy: Equatable {
        var proxy: String?
        var noProxy: String?

        static func read(_ lookup: (String) -> String? = { name in getenv(name).map { String(cString: $0) } }) -> EnvironmentProxy {
            func first(_ names: [String]) -> String? {
                for name in names { if let value = lookup(name), !value.isEmpty { return value } }
                return nil
            }
            return EnvironmentProxy(proxy: first(["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]),
                                    noProxy: first(["no_proxy", "NO_PROXY"]))
        }
    }

    private static func hostForURL(_ host: String) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
    }

    /// The transfer pool index a handle's `CURLOPT_PRIVATE` holds (index + 1, so 0 means unset),
    /// or nil when it is not one of `count` transfers.
    static func poolIndex(privateData: UnsafeMutableRawPointer?, count: Int) -> Int? {
        let index = Int(bitPattern: privateData) - 1
        return index >= 0 && index < count ? index : nil
    }
}
