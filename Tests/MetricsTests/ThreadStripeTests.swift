import Foundation
import Locking
import Testing
@testable import Metrics

@Suite struct ThreadStripeTests {
    @Test func eachThreadKeepsItsOwnNumberAndNewThreadsGetNewOnes() {
        let stripe = ThreadStripe.shared
        let mine = stripe.current()
        #expect(stripe.current() == mine)

        final class Seen: Sendable { let numbers = Lock<[UInt]>([]) }
        let seen = Seen()
        let done = DispatchGroup()
        for _ in 0..<4 {
            done.enter()
            Thread {
                let first = stripe.current()
                let again = stripe.current()
                seen.numbers.withLock { $0.append(first == again ? first : .max) }
                done.leave()
            }.start()
        }
        done.wait()
        let numbers = seen.numbers.withLock { $0 }
        #expect(!numbers.contains(.max))
        #expect(Set(numbers + [mine]).count == 5)
        #expect(ThreadStripe.stripeCount >= 4 && ThreadStripe.stripeCount <= 16)
        #expect(ThreadStripe.stripeCount & (ThreadStripe.stripeCount - 1) == 0)
    }
}
