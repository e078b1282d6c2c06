/// How a batch of requests is dealt out to the event loops: each loop gets what brings it
/// closest to an even number of unfinished requests, the least loaded first.
///
/// The submitter wakes once a quarter of the window is free and then holds a batch as large
/// as a loop's whole share of streams (2 threads × 2 connections × 100 streams: 200 of a
/// window of 800). Handed to one loop, that loop's queue filled while the other's ran dry
/// until the next wake-up, and with two connections per loop libcurl fills the first
/// connection before the second, so the second carried 40 % of the loop's requests instead
/// of half (docs/dispatcher-measurements.md, "2 connections × 100 streams").
///
/// A plain function of the loops' loads, so every split is testable.
enum LoopShares {
    /// How many of `count` new requests each loop takes, given each loop's unfinished requests
    /// (`loads`, in loop order): water-filling, the least loaded raised first, ties to the loop
    /// at `start` and then in turn, so no loop is favoured. Shares add up to `count`.
    static func split(_ count: Int, loads: [Int], start: Int = 0) -> [Int] {
        var shares = [Int](repeating: 0, count: loads.count)
        guard count > 0, !loads.isEmpty else { return shares }
        // Loop indices by load, ties in turn from `start`.
        let order = loads.indices.sorted { a, b in
            if loads[a] != loads[b] { return loads[a] < loads[b] }
            return (a - start + loads.count) % loads.count < (b - start + loads.count) % loads.count
        }
        var left = count
        var level = loads[order[0]]
        var raised = 1
        // Raise the `raised` least loaded loops together to the next loop's load while the batch lasts.
        while left > 0 {
            let next = raised < order.count ? loads[order[raised]] : Int.max
            let step = min(next - level, left / raised)
            if step > 0 {
                for index in order[..<raised] { shares[index] += step }
                left -= step * raised
                level += step
            }
            if level == next {
                raised += 1
                continue
            }
            // Fewer left than loops at this level: one more each, in turn from the least loaded.
            for index in order[..<raised] where left > 0 {
                shares[index] += 1
                left -= 1
            }
        }
        return shares
    }
}
