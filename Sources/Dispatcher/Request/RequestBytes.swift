internal import CCurl
import Glibc

/// The bytes of one request as libcurl reads them, in one allocation that never moves or
/// changes after `init`: `headerCount` header list nodes, the path and each header line
/// NUL-terminated, then the body. A transfer points libcurl at them and keeps the request
/// until libcurl is done with it, so nothing is copied per send.
///
/// Thread rule: immutable after `init`, so any thread may read it; libcurl reads it only on
/// the loop thread that runs the transfer.
///
/// Requests that differ only in their path (a campaign's) share one block with their header
/// lines and body and each keep a block with their path alone (`DispatchRequest.shared`).
final class RequestBytes: @unchecked Sendable {
    private let base: UnsafeMutableRawPointer
    let headerCount: Int
    private let pathLength: Int
    private let bodyOffset: Int
    let bodyCount: Int

    private static var nodeSize: Int { MemoryLayout<curl_slist>.stride }

    init(path: String, headers: DispatchRequest.HeaderBlock, body: UnsafeRawBufferPointer) {
        headerCount = headers.count
        pathLength = path.utf8.count
        let pathOffset = headerCount * Self.nodeSize
        bodyOffset = pathOffset + pathLength + 1 + headers.packed.count
        bodyCount = body.count
        base = UnsafeMutableRawPointer.allocate(byteCount: max(1, bodyOffset + bodyCount), alignment: MemoryLayout<curl_slist>.alignment)
        var path = path
        path.withUTF8 { (base + pathOffset).copyMemory(from: $0.baseAddress!, byteCount: pathLength) }
        (base + pathOffset + pathLength).storeBytes(of: 0, as: UInt8.self)
        headers.packed.withUnsafeBytes { if $0.count > 0 { (base + pathOffset + pathLength + 1).copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
        if bodyCount > 0 { (base + bodyOffset).copyMemory(from: body.baseAddress!, byteCount: bodyCount) }
        let nodes = base.bindMemory(to: curl_slist.self, capacity: headerCount)
        var line = base + pathOffset + pathLength + 1
        for index in 0..<headerCount {
            let text = line.assumingMemoryBound(to: CChar.self)
            (nodes + index).initialize(to: curl_slist(data: text, next: index + 1 < headerCount ? nodes + index + 1 : nil))
            line += strlen(text) + 1
        }
    }

    deinit {
        base.deallocate()
    }

    /// The list libcurl sends as `CURLOPT_HTTPHEADER`, or nil without header lines.
    var headerList: UnsafeMutablePointer<curl_slist>? {
        headerCount == 0 ? nil : base.assumingMemoryBound(to: curl_slist.self)
    }

    /// The path, NUL-terminated.
    var pathPointer: UnsafePointer<CChar> {
        UnsafePointer((base + headerCount * Self.nodeSize).assumingMemoryBound(to: CChar.self))
    }

    var bodyPointer: UnsafeMutableRawPointer { base + bodyOffset }

    var path: String {
        String(decoding: UnsafeRawBufferPointer(start: base + headerCount * Self.nodeSize, count: pathLength), as: UTF8.self)
    }

    var headerLines: [String] {
        let start = headerCount * Self.nodeSize + pathLength + 1
        return UnsafeRawBufferPointer(start: base + start, count: bodyOffset - start)
            .split(separator: 0, omittingEmptySubsequences: false)
            .prefix(headerCount).map { String(decoding: $0, as: UTF8.self) }
    }

    var body: [UInt8] { Array(UnsafeRawBufferPointer(start: base + bodyOffset, count: bodyCount)) }
}
