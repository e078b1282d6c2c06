import APNs
#if canImport(Glibc)
import Glibc
#endif

/// The validator's verdict on a connection's last request, reused for the next request that
/// repeats its method, headers and payload and differs only in the device token of its path,
/// as the requests of a campaign do: validation (topic rules, header values, the payload's
/// JSON) was the mock's largest own cost per request.
///
/// `APNsRequestValidator.validate` is a pure function whose verdict depends on the path only
/// through the device token: a path of `devicePathPrefix` followed by a token that
/// `DeviceToken` accepts (hex only, so no `/` or `?`) passes every path check, and the token
/// is the only part of an accepted request taken from the path. So the verdict for such a
/// path is the remembered one with the new token in it. A request whose path is anything else
/// is validated in full and remembered by no one. `LogicTests` compares both ways on varied
/// requests.
struct ValidationMemo {
    private var method = ""
    private var headers: [HeaderField] = []
    private var body: [UInt8] = []
    private var verdict: APNsRequestVerdict?

    mutating func validate(_ request: IncomingRequest, with validator: APNsRequestValidator) -> APNsRequestVerdict {
        let token = Self.deviceToken(inPath: request.path)
        if let token, let verdict, request.method == method, request.headers == headers, Self.same(request.body, body) {
            guard case .accepted(var accepted) = verdict else { return verdict }
            accepted.token = token
            return .accepted(accepted)
        }
        let fresh = validator.validate(method: request.method, path: request.path, headers: request.headers, body: request.body)
        if token != nil {
            method = request.method
            headers = request.headers
            body = request.body
            verdict = fresh
        } else {
            verdict = nil
        }
        return fresh
    }

    private static func same(_ left: [UInt8], _ right: [UInt8]) -> Bool {
        left.count == right.count && left.withUnsafeBufferPointer { a in
            right.withUnsafeBufferPointer { b in a.isEmpty || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
        }
    }

    /// The token of a `/3/device/<token>` path that passes all of the validator's path checks.
    /// Compared in contiguous bytes: the generic `starts(with:)` on two UTF-8 views took ~900
    /// instructions per request.
    private static func deviceToken(inPath path: String) -> DeviceToken? {
        var path = path
        return path.withUTF8 { bytes -> DeviceToken? in
            let prefixLength = devicePathPrefix.count
            guard bytes.count > prefixLength, let start = bytes.baseAddress,
                  devicePathPrefix.withUnsafeBufferPointer({ memcmp(start, $0.baseAddress!, prefixLength) == 0 }) else { return nil }
            return try? DeviceToken(String(decoding: UnsafeBufferPointer(rebasing: bytes[prefixLength...]), as: UTF8.self))
        }
    }

    private static let devicePathPrefix = Array(APNsRequestValidator.devicePathPrefix.utf8)
}
