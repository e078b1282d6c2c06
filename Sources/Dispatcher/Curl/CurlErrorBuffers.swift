internal import CCurl
import Glibc

/// The `CURLOPT_ERRORBUFFER`s of one loop's transfers, in anonymous memory that becomes
/// resident only where libcurl writes a message: a buffer per transfer is needed because one
/// `curl_multi_socket_action` can fail many transfers (a dropped connection), each with its
/// own message, but almost all transfers end without one.
///
/// libcurl 8.14 writes a transfer's buffer in two places: `failf` (the first message of a
/// failed transfer) and `curl_multi_add_handle`, which clears its first byte. So a transfer
/// attaches its buffer only after it was added (`CurlTransfer.attachErrorBuffer`), and the
/// clearing is done by the transfer, only where a message was left.
///
/// Thread rule: used only on its event loop's thread.
final class CurlErrorBuffers {
    static let size = Int(pushd_curl_max_errorsize())
    /// Buffers per mapping: 64 KiB, well below a huge page, so the kernel never backs a
    /// mapping with 2 MB for one message.
    private static let perSlab = 256
    private var slabs: [UnsafeMutableRawPointer] = []

    deinit {
        for slab in slabs { munmap(slab, Self.perSlab * Self.size) }
    }

    /// The buffer of the transfer with pool index `index`; indexes come in order from 0, as
    /// the pool grows.
    func buffer(for index: Int) throws(DispatcherConfigurationError) -> UnsafeMutablePointer<CChar> {
        let slab = index / Self.perSlab
        if slab == slabs.count {
            let length = Self.perSlab * Self.size
            guard let mapped = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                  mapped != UnsafeMutableRawPointer(bitPattern: -1) else {
                throw .transportRejected(setting: "CURLOPT_ERRORBUFFER", message: "mmap: \(String(cString: strerror(errno)))")
            }
            // Advice only; without it a run of these mappings merged into one may be backed by huge pages.
            _ = madvise(mapped, length, MADV_NOHUGEPAGE)
            slabs.append(mapped)
        }
        precondition(slab < slabs.count, "error buffers are handed out in pool order")
        return (slabs[slab] + (index % Self.perSlab) * Self.size).assumingMemoryBound(to: CChar.self)
    }
}
