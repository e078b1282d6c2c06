import CCurl
import CLibPQ
import CMicroHTTPD
import CNghttp2
import COpenSSL
import CYAML
import Glibc
import Testing

@Suite struct ShimVersionTests {
    @Test func curlIsBuiltWithHTTP2AndOpenSSL() throws {
        #expect(pushd_openssl_init() == 1)
        #expect(curl_global_init(pushd_curl_global_all()) == CURLE_OK)
        let info = try #require(pushd_curl_version_info())
        #expect(pushd_curl_version_has_http2(info) != 0)
        #expect(info.pointee.nghttp2_version != nil)
        let ssl = String(cString: info.pointee.ssl_version)
        #expect(ssl.hasPrefix("OpenSSL/"), "libcurl uses \(ssl), expected OpenSSL")
    }

    @Test func curlTypedSettersReachTheHandle() throws {
        let easy = try #require(curl_easy_init())
        defer { curl_easy_cleanup(easy) }
        #expect(pushd_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, pushd_curl_http_version_2tls()) == CURLE_OK)
        #expect(pushd_curl_easy_setopt_string(easy, CURLOPT_URL, "https://127.0.0.1:1/") == CURLE_OK)
        var code: Int = -1
        #expect(pushd_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK)
        #expect(code == 0)
        // An out-of-range value is refused, which proves the setter passes the value through.
        #expect(pushd_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, 999) != CURLE_OK)

        let multi = try #require(curl_multi_init())
        defer { curl_multi_cleanup(multi) }
        #expect(pushd_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, pushd_curl_pipe_multiplex()) == CURLM_OK)
        #expect(pushd_curl_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, 1000) == CURLM_OK)
    }

    @Test func libpqIsAtLeastVersion15() {
        #expect(PQlibVersion() >= 150_000)
    }

    @Test func openSSLIsVersion3() {
        #expect(pushd_openssl_init() == 1)
        #expect(pushd_openssl_version_number() >= 0x3000_0000)
        #expect(String(cString: pushd_openssl_version_string()).hasPrefix("OpenSSL 3"))
    }

    @Test func nghttp2ReportsVersionAndALPN() {
        #expect(!String(cString: pushd_nghttp2_version_string()).isEmpty)
        #expect(pushd_nghttp2_alpn_h2_length() == 2)
        let alpn = String(decoding: UnsafeBufferPointer(start: pushd_nghttp2_alpn_h2(), count: 2), as: UTF8.self)
        #expect(alpn == "h2")
    }

    @Test func microhttpdStartsOnAnEphemeralPortAndStops() throws {
        #expect(String(cString: pushd_mhd_version_string()).hasPrefix("0.9"))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        let daemon = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                pushd_mhd_start(pushd_mhd_flags_internal_thread(), $0, { _, _, _, _, _, _, _, _ in MHD_Result(rawValue: 0)! }, nil, 4, 5)
            }
        }
        let started = try #require(daemon)
        #expect(pushd_mhd_bound_port(started) > 0)
        MHD_stop_daemon(started)
    }

    @Test func libyamlReportsVersion() {
        #expect(String(cString: pushd_yaml_version_string()).hasPrefix("0.2"))
    }
}
