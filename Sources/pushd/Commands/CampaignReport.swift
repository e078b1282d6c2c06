import Posix
import QueueStore

/// The figures of a campaign that its progress display reads.
struct CampaignFigures: Sendable, Equatable {
    var id: Int64
    var app: String
    var name: String
    var status: CampaignStatus
    var pushType: String
    var priority: Int
    var rateLimit: Int?
    var targets: Int
    var sent: Int
    var failed: Int
    var failedByReason: [String: Int]
    var pruned: Int
    var keptTokens: Int = 0
    var chunksTotal: Int
    var chunksDone: Int
    var createdAt: Timestamp
    var startAt: Timestamp?
    var startedAt: Timestamp?
    var finishedAt: Timestamp?

    var remaining: Int { max(0, targets - sent - failed) }
}

extension CampaignFigures {
    init(_ campaign: Campaign) {
        self.init(id: campaign.id, app: campaign.app, name: campaign.name, status: campaign.status, pushType: campaign.pushType,
                  priority: campaign.priority, rateLimit: campaign.rateLimit, targets: campaign.targets, sent: campaign.sent,
                  failed: campaign.failed, failedByReason: campaign.failedByReason, pruned: campaign.pruned,
                  chunksTotal: campaign.chunksTotal, chunksDone: campaign.chunksDone, createdAt: campaign.createdAt,
                  startAt: campaign.startAt, startedAt: campaign.startedAt, finishedAt: campaign.finishedAt)
        keptTokens = campaign.keptTokens
    }
}

/// How a campaign's progress is shown: the status block, the one-line progress bar drawn on
/// a terminal, and the plain line written when output goes to a file or a pipe.
enum CampaignReport {
    static func processed(_ campaign: CampaignFigures) -> Int { campaign.sent + campaign.failed }

    static func fraction(_ campaign: CampaignFigures) -> Double {
        campaign.targets == 0 ? 0 : min(1, Double(processed(campaign)) / Double(campaign.targets))
    }

    static func percent(_ campaign: CampaignFigures) -> String {
        (fraction(campaign) * 100).fixed(1) + "%"
    }

    /// Notifications per second since the campaign started, up to its end or `now`.
    static func averageRate(_ campaign: CampaignFigures, now: Timestamp) -> Double? {
        guard let started = campaign.startedAt else { return nil }
        let end = campaign.finishedAt ?? now
        let seconds = end.timeIntervalSince(started)
        guard seconds >= 1, processed(campaign) > 0 else { return nil }
        return Double(processed(campaign)) / seconds
    }

    /// Seconds left at `rate`, or nil when nothing moves or nothing is left to do.
    static func eta(_ campaign: CampaignFigures, rate: Double?) -> Double? {
        guard !campaign.status.isFinal, campaign.remaining > 0, let rate, rate > 0 else { return nil }
        return Double(campaign.remaining) / rate
    }

    static func rateText(_ rate: Double?) -> String {
        guard let rate else { return "-" }
        return rate >= 100 ? "\(Int(rate.rounded()))/s" : rate.fixed(1) + "/s"
    }

    static func failures(_ campaign: CampaignFigures) -> String {
        guard campaign.failed > 0 else { return "0" }
        let reasons = campaign.failedByReason.sorted { ($1.value, $0.key) < ($0.value, $1.key) }
            .map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        return reasons.isEmpty ? "\(campaign.failed)" : "\(campaign.failed) (\(reasons))"
    }

    static func statusLines(_ campaign: CampaignFigures, now: Timestamp) -> [String] {
        var settings = [campaign.pushType, "priority \(campaign.priority)"]
        if let limit = campaign.rateLimit { settings.append("rate limit \(limit)/s") }
        let rate = averageRate(campaign, now: now)
        var rows: [[String]] = [
            ["app", "\(campaign.app) (\(settings.joined(separator: ", ")))"],
            ["targets", "\(campaign.targets)"],
            ["sent", "\(campaign.sent)"],
            ["failed", failures(campaign)],
            ["pruned", campaign.keptTokens == 0 ? "\(campaign.pruned)"
                : "\(campaign.pruned) (\(campaign.keptTokens) more kept: registered again after APNs' timestamp)"],
            ["remaining", "\(campaign.remaining)"],
            ["progress", "\(percent(campaign)) of \(campaign.chunksTotal) chunks, \(campaign.chunksDone) finished"],
            ["created", TimeText.moment(campaign.createdAt)],
        ]
        if campaign.status == .scheduled || (campaign.startedAt == nil && campaign.startAt != nil) {
            rows.append(["starts", TimeText.moment(campaign.startAt)])
        }
        rows.append(["started", TimeText.moment(campaign.startedAt)])
        rows.append(["finished", TimeText.moment(campaign.finishedAt)])
        let over = campaign.finishedAt != nil ? "over the whole run" : "average since the start"
        rows.append(["rate", rate == nil ? "-" : "\(rateText(rate)) \(over)"])
        if let eta = eta(campaign, rate: rate), campaign.status == .running {
            rows.append(["eta", TimeText.duration(eta)])
        }
        let header = "campaign \(campaign.id) \"\(campaign.name)\": \(campaign.status.rawValue)"
        return [header] + TextTable.render(rows).map { "  " + $0 }
    }

    /// `[##########··········]  50.0%  1000/2000  812/s  ETA 1m14s  running`, at most about 80 columns.
    static func progressBar(_ campaign: CampaignFigures, rate: Double?, width: Int = 24) -> String {
        let filled = Int((fraction(campaign) * Double(width)).rounded(.down))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        let eta = eta(campaign, rate: rate).map(TimeText.duration) ?? "-"
        var line = "[\(bar)] \(percent(campaign).leftPadded(6))  \(processed(campaign))/\(campaign.targets)"
        if campaign.failed > 0 { line += " (\(campaign.failed) failed)" }
        line += "  \(rateText(rate))"
        if !campaign.status.isFinal { line += "  ETA \(eta)" }
        return line + "  \(campaign.status.rawValue)"
    }

    /// One self-contained line per sample, for logs and pipes.
    static func plainLine(_ campaign: CampaignFigures, rate: Double?, now: Timestamp) -> String {
        var line = "\(TimeText.moment(now))  campaign \(campaign.id) \(campaign.status.rawValue)"
        line += "  \(processed(campaign))/\(campaign.targets) (\(percent(campaign)))"
        line += "  sent \(campaign.sent)  failed \(campaign.failed)  pruned \(campaign.pruned)"
        line += "  rate \(rateText(rate))"
        if let eta = eta(campaign, rate: rate) { line += "  eta \(TimeText.duration(eta))" }
        return line
    }
}

/// The sending rate between successive samples, smoothed so that one slow checkpoint does
/// not make the ETA jump.
struct RateMeter {
    /// Weight of the newest interval.
    var smoothing = 0.3
    private var last: (processed: Int, at: Timestamp)?
    private(set) var rate: Double?

    mutating func observe(processed: Int, at now: Timestamp) -> Double? {
        defer { last = (processed, now) }
        guard let last else { return rate }
        let seconds = now.timeIntervalSince(last.at)
        guard seconds > 0 else { return rate }
        let current = Double(max(0, processed - last.processed)) / seconds
        rate = rate.map { $0 + smoothing * (current - $0) } ?? current
        return rate
    }
}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
