import Posix

public enum CampaignStatus: String, Sendable, Hashable, CaseIterable {
    case draft, scheduled, running, paused, done, cancelled

    /// No more sending will happen; its targets may be dropped.
    public var isFinal: Bool { self == .done || self == .cancelled }

    /// Whether `action` may be applied to a campaign in this status.
    public func allows(_ action: CampaignAction) -> Bool {
        action.allowedFrom.contains(self)
    }
}

/// An operator's command on a campaign; the SQL in `CampaignStore` applies exactly these rules.
public enum CampaignAction: String, Sendable, Hashable, CaseIterable {
    case start, pause, resume, cancel

    public var allowedFrom: [CampaignStatus] {
        switch self {
        case .start: [.draft]
        case .pause: [.running, .scheduled]
        case .resume: [.paused]
        case .cancel: [.draft, .scheduled, .running, .paused]
        }
    }
}

/// What to create: everything a campaign is except its audience and counters.
public struct NewCampaign: Sendable, Hashable {
    public var app: String
    public var name: String
    public var pushType: String
    public var priority: Int
    public var environment: String?
    /// The payload sent to every target without one of its own; nil when every target has one.
    public var payload: String?
    public var collapseID: String?
    public var expiration: Timestamp?
    /// Sending does not begin before this time.
    public var startAt: Timestamp?
    /// Notifications per second across all pushd instances; nil is unlimited.
    public var rateLimit: Int?

    /// `priority` nil means 5 for background pushes (the only priority APNs allows them) and 10 otherwise.
    public init(app: String, name: String, pushType: String = "alert", priority: Int? = nil,
                environment: String? = nil, payload: String?, collapseID: String? = nil, expiration: Timestamp? = nil,
                startAt: Timestamp? = nil, rateLimit: Int? = nil) {
        self.app = app
        self.name = name
        self.pushType = pushType
        self.priority = priority ?? (pushType == "background" ? 5 : 10)
        self.environment = environment
        self.payload = payload
        self.collapseID = collapseID
        self.expiration = expiration
        self.startAt = startAt
        self.rateLimit = rateLimit
    }
}

/// A campaign with its counters, as `CampaignStore.campaign` reads it.
public struct Campaign: Sendable, Hashable {
    public var id: Int64
    public var app: String
    public var name: String
    public var status: CampaignStatus
    public var pushType: String
    public var priority: Int
    public var payload: String?
    public var startAt: Timestamp?
    public var rateLimit: Int?
    public var targets: Int
    public var sent: Int
    public var failed: Int
    public var failedByReason: [String: Int]
    /// Tokens this campaign's answers invalidated in `pushd.device_tokens`.
    public var pruned: Int
    /// 410 answers whose token was registered again after APNs' timestamp, so it was kept.
    public var keptTokens: Int = 0
    public var chunksTotal: Int
    public var chunksDone: Int
    public var createdAt: Timestamp
    public var startedAt: Timestamp?
    public var finishedAt: Timestamp?

    /// Targets neither sent nor failed yet.
    public var remaining: Int { max(0, targets - sent - failed) }
}

/// One recipient of a campaign chunk.
public struct CampaignTarget: Sendable, Hashable {
    /// Position within the chunk, the unit of checkpoints.
    public var index: Int
    public var token: String
    /// Overrides the campaign's payload when present.
    public var payload: String?
    /// The registered token's environment (targets imported from `pushd.device_tokens`);
    /// nil means the campaign's.
    public var environment: String?

    public init(index: Int, token: String, payload: String?, environment: String? = nil) {
        self.index = index
        self.token = token
        self.payload = payload
        self.environment = environment
    }
}

/// The targets of a leased chunk: their tokens raw in one block (`DeviceTokenBlock`), their
/// payloads and environments only when some target has its own. Read as `CampaignTarget`s
/// (each makes its token's hex), or per field by offset where a target is sent.
public struct CampaignTargets: RandomAccessCollection, Sendable, Hashable {
    /// The position within the chunk of the first target.
    public var firstIndex: Int
    public var tokens: DeviceTokenBlock
    /// One per target, or empty when every target has the campaign's payload.
    public var payloads: [String?]
    /// One per target, or empty when every target has the campaign's environment.
    public var environments: [String?]

    public init(firstIndex: Int = 0, tokens: DeviceTokenBlock = DeviceTokenBlock(), payloads: [String?] = [], environments: [String?] = []) {
        self.firstIndex = firstIndex
        self.tokens = tokens
        self.payloads = payloads
        self.environments = environments
    }

    /// Targets at consecutive positions from the first one's.
    public init(_ targets: [CampaignTarget]) {
        self.init(firstIndex: targets.first?.index ?? 0, tokens: DeviceTokenBlock(hex: targets.map(\.token)),
                  payloads: targets.contains { $0.payload != nil } ? targets.map(\.payload) : [],
                  environments: targets.contains { $0.environment != nil } ? targets.map(\.environment) : [])
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { tokens.count }

    public subscript(offset: Int) -> CampaignTarget {
        CampaignTarget(index: firstIndex + offset, token: tokens.hex(at: offset), payload: payload(at: offset),
                       environment: environment(at: offset))
    }

    /// The target's own payload, nil for the campaign's.
    public func payload(at offset: Int) -> String? {
        offset < payloads.count ? payloads[offset] : nil
    }

    /// The target's registered environment, nil for the campaign's.
    public func environment(at offset: Int) -> String? {
        offset < environments.count ? environments[offset] : nil
    }
}

/// A leased chunk: the targets from its last checkpoint on, and what to send them.
public struct CampaignChunk: Sendable, Hashable {
    public var campaignID: Int64
    public var chunk: Int
    public var owner: String
    public var leaseUntil: Timestamp
    public var size: Int
    /// The checkpoint the chunk resumed from (0 for a fresh chunk).
    public var startIndex: Int
    public var app: String
    public var pushType: String
    public var priority: Int
    public var environment: String?
    public var collapseID: String?
    public var expiration: Timestamp?
    public var payload: String?
    public var rateLimit: Int?
    public var targets: CampaignTargets
    /// The worker whose lease on this chunk ran out before it was handed here (it was killed,
    /// hung or lost the database), and when; nil for a fresh or released chunk.
    public var expiredOwner: String? = nil
    public var expiredAt: Timestamp? = nil
    /// The environment every target of the chunk goes to, as its import (registered tokens,
    /// schema version 35) or the migration to version 35 recorded it; nil when they go to the
    /// campaign's or the app's environment (a file import's) or to both. The lease can pass
    /// over the chunks of one environment by it.
    public var targetsEnvironment: String? = nil

    /// The environments a chunk can record (`campaign_chunks.environment`).
    public static let taggedEnvironments = ["production", "sandbox"]
}

/// Outcomes since the previous checkpoint of a chunk (deltas, not totals).
public struct ChunkProgress: Sendable, Hashable {
    /// Every target before this index has an outcome.
    public var position: Int
    public var sent: Int
    public var failedByReason: [String: Int]
    /// Tokens invalidated in `pushd.device_tokens` by this progress's answers.
    public var pruned: Int
    /// 410 answers whose token was registered again after APNs' timestamp, so it was kept.
    public var keptTokens: Int

    public init(position: Int, sent: Int = 0, failedByReason: [String: Int] = [:], pruned: Int = 0, keptTokens: Int = 0) {
        self.position = position
        self.sent = sent
        self.failedByReason = failedByReason
        self.pruned = pruned
        self.keptTokens = keptTokens
    }

    public var failed: Int { failedByReason.values.reduce(0, +) }
}

/// What a worker should do after recording progress.
public enum ChunkDirective: Sendable, Hashable {
    /// Keep sending this chunk.
    case proceed
    /// The campaign is paused, cancelled or done: release the chunk and stop.
    case stop(CampaignStatus)
    /// The lease expired and another worker took the chunk: stop without recording more.
    case leaseLost
    /// A CHECK refuses to write the campaign's row (`CampaignRefusal`): the campaign is held,
    /// this chunk's progress was written without it; release the chunk and stop.
    case refused(CampaignRefusal)
}
