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
///
/// A block that carries header lines lists two more after them, "Accept:" and
/// "Content-Type:": without a value they tell libcurl to leave out the `accept: */*` and
/// `content-type: application/x-www-form-urlencoded` it adds to every POST of its own
/// accord. APNs reads neither (the payload is JSON, not a form); leaving them out saved about
/// 2,700 instructions per request in libc and nghttp2 (docs/dispatcher.md).
final class RequestBytes: @unchecked Sendable {
    private let base: UnsafeMutableRawPointer
    /// The request's own header lines.
    let headerCount: Int
    /// List nodes: the request's lines and, when it has a list, the two that drop libcurl's.
    private let nodeCount: Int
    private let pathLength: Int
    private let bodyOffset: Int
    let bodyCount: Int

    private static var nodeSize: Int { MemoryLayout<curl_slist>.stride }
    /// Header names libcurl adds unless the list names them; an empty value sends nothing.
    static let withoutLibcurlDefaults: [UInt8] = Array("Accept:\0Content-Type:\0".utf8)
    static let libcurlDefaultCount = 2

    /// - Parameter listsHeaders: false for a block that holds a path alone, whose request
    ///   takes its list from a shared block.
    init(path: String, headers: DispatchRequest.HeaderBlock, body: UnsafeRawBufferPointer, listsHeaders: Bool = true) {
        headerCount = headers.count
        nodeCount = listsHeaders ? headers.count + Self.libcurlDefaultCount : 0
        pathLength = path.utf8.count
        let pathOffset = nodeCount * Self.nodeSize
        let linesLength = headers.packed.count + (listsHeaders ? Self.withoutLibcurlDefaults.count : 0)
        bodyOffset = pathOffset + pathLength + 1 + linesLength
        bodyCount = body.count
        base = UnsafeMutableRawPointer.allocate(byteCount: max(1, bodyOffset + bodyCount), alignment: MemoryLayout<curl_slist>.alignment)
        var path = path
        path.withUTF8 { (base + pathOffset).copyMemory(from: $0.baseAddress!, byteCount: pathLength) }
        (base + pathOffset + pathLength).storeBytes(of: 0, as: UInt8.self)
        headers.packed.withUnsafeBytes { if $0.count > 0 { (base + pathOffset + pathLength + 1).copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
        if listsHeaders {
            Self.withoutLibcurlDefaults.withUnsafeBytes {
                (base + pathOffset + pathLength + 1 + headers.packed.count).copyMemory(from: $0.baseAddress!, byteCount: $0.count)
            }
        }
        if bodyCount > 0 { (base + bodyOffset).copyMemory(from: body.baseAddress!, byteCount: bodyCount) }
        let nodes = base.bindMemory(to: curl_slist.self, capacity: nodeCount)
        var line = base + pathOffset + pathLength + 1
        for index in 0..<nodeCount {
            let text = line.assumingMemoryBound(to: CChar.self)
            (nodes + index).initialize(to: curl_slist(data: text, next: index + 1 < nodeCount ? nodes + index + 1 : nil))
            line += strlen(text) + 1
        }
    }

    /// A block that holds a path alone, `pathLength` printable ASCII bytes that `writePath`
    /// writes in place: a campaign's device path costs no string of its own.
    init(pathLength: Int, writePath: (UnsafeMutableRawPointer) -> Void) {
        headerCount = 0
        nodeCount = 0
        self.pathLength = pathLength
        bodyOffset = pathLength + 1
        bodyCount = 0
        base = UnsafeMutableRawPointer.allocate(byteCount: pathLength + 1, alignment: MemoryLayout<curl_slist>.alignment)
        writePath(base)
        (base + pathLength).storeBytes(of: 0, as: UInt8.self)
    }

    deinit {
        base.deallocate()
    }

    /// The list libcurl sends as `CURLOPT_HTTPHEADER`, or nil without header lines.
    var headerList: UnsafeMutablePointer<curl_slist>? {
        nodeCount == 0 ? nil : base.assumingMemoryBound(to: curl_slist.self)
    }

    /// Every line libcurl is given, the two that drop its defaults included.
    var listedLines: [String] {
        var lines: [String] = []
        var node = headerList
        while let current = node {
            lines.append(String(cString: current.pointee.data))
            node = current.pointee.next
        }
        return lines
    }

    /// The path, NUL-terminated.
    var pathPointer: UnsafePointer<CChar> {
        UnsafePointer((base + nodeCount * Self.nodeSize).assumingMemoryBound(to: CChar.self))
    }

    var bodyPointer: UnsafeMutableRawPointer { base + bodyOffset }

    var path: String {
        String(decoding: UnsafeRawBufferPointer(start: base + nodeCount * Self.nodeSize, count: pathLength), as: UTF8.self)
    }

    var headerLines: [String] {
        let start = nodeCount * Self.nodeSize + pathLength + 1
        return UnsafeRawBufferPointer(start: base + start, count: bodyOffset - start)
            .split(separator: 0, omittingEmptySubsequences: false)
            .prefix(headerCount).map { String(decoding: $0, as: UTF8.self) }
    }

    var body: [UInt8] { Array(UnsafeRawBufferPointer(start: base + bodyOffset, count: bodyCount)) }
}
