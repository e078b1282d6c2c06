/// What a worker got when it asked for work.
public enum Work: Sendable, Hashable {
    /// A batch from the transactional lane; its transaction is open on the connection.
    case jobs(ClaimedJobs)
    /// A leased campaign chunk; no transaction is open.
    case chunk(CampaignChunk)
    case none
}

/// Hands out work with transactional jobs strictly first: a campaign chunk is
/// leased only when no job is due. Both come only from `apps`.
public struct WorkSource: Sendable {
    public var jobs = JobQueue()
    public var campaigns = CampaignStore()

    public init() {}

    public func claimWork(_ connection: PGConnection, jobLimit: Int, owner: String, leaseSeconds: Double,
                          apps: [String]) throws -> Work {
        let batch = try jobs.claim(connection, limit: jobLimit, apps: apps)
        if !batch.isEmpty { return .jobs(batch) }
        if let chunk = try campaigns.leaseChunk(connection, owner: owner, apps: apps, leaseSeconds: leaseSeconds) {
            return .chunk(chunk)
        }
        return .none
    }
}
