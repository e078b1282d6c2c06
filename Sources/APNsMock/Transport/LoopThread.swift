#if canImport(Glibc)
import Glibc
#endif

/// A joinable POSIX thread running one closure; Foundation's `Thread` cannot be joined.
final class LoopThread: @unchecked Sendable {
    private final class Body {
        let work: () -> Void
        init(work: @escaping () -> Void) { self.work = work }
    }

    private var handle: pthread_t
    private var joined = false

    init(_ work: @escaping () -> Void) throws(MockServerError) {
        let body = Unmanaged.passRetained(Body(work: work)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, { raw in
            let body = Unmanaged<Body>.fromOpaque(raw!).takeRetainedValue()
            body.work()
            return nil
        }, body)
        if result != 0 {
            Unmanaged<Body>.fromOpaque(body).release()
            throw .system("pthread_create", result)
        }
        handle = thread
    }

    func join() {
        guard !joined else { return }
        joined = true
        pthread_join(handle, nil)
    }
}
