import Testing
@testable import Dispatcher
@testable import pushd

/// A campaign worker takes its answers batch after batch into one array: the queue and the
/// worker swap their two arrays instead of allocating one per batch.
@Suite struct CompletionQueueTests {
    static func answer(_ index: Int) -> DispatchResult {
        DispatchResult(tag: CompletionQueue.tag(worker: 0, generation: 1, index: index),
                       outcome: .response(Response(status: 200, apnsID: nil, body: [])), latencyNanoseconds: 0, attempts: 1)
    }

    @Test func batchesTakenIntoOneArrayArriveWholeInOrderInTwoAlternatingBuffers() {
        let queue = CompletionQueue()
        var taken = [DispatchResult]()
        var buffers = Set<UInt>()
        var next = 0
        for round in 0..<8 {
            for _ in 0..<300 {
                queue.push(Self.answer(next))
                next += 1
            }
            queue.take(atLeast: 300, until: RateLimiter.monotonicSeconds() + 5, into: &taken)
            #expect(taken.map { CompletionQueue.index(of: $0.tag) } == Array(next - 300..<next), "round \(round)")
            // The first round's array is the one the queue started with; from the second on,
            // the two arrays go back and forth.
            if round > 0 { buffers.insert(taken.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }) }
            #expect(queue.capacity >= 300 || round == 0, "the queue's array kept no room after round \(round)")
        }
        #expect(buffers.count == 2, "batches came in \(buffers.count) different arrays")
    }

    @Test func aTakeThatTimesOutHandsOverWhatIsThere() {
        let queue = CompletionQueue()
        var taken = [Self.answer(99)]
        queue.push(Self.answer(0))
        queue.take(atLeast: 5, until: RateLimiter.monotonicSeconds() + 0.01, into: &taken)
        #expect(taken.map { CompletionQueue.index(of: $0.tag) } == [0])
        queue.take(atLeast: 1, until: RateLimiter.monotonicSeconds() + 0.01, into: &taken)
        #expect(taken.isEmpty)
    }
}
