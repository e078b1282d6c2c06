import APNs
import Posix

/// Builds the APNs request for a job or a campaign target, or says why it can never
/// be sent (that job goes to dead letters with the reason, it is never dropped).
struct NotificationFactory: Sendable {
    struct Rejection: Error, Equatable, CustomStringConvertible {
        /// What was wrong, from a closed set (an APNs reason or `Invalid`): fit for a label.
        var label: String
        var detail: String
        /// The label and the detail, as stored with the failed job.
        var reason: String { "\(label): \(detail)" }
        var description: String { reason }
    }

    /// The fields a job or campaign target carries, as stored.
    struct Fields: Sendable {
        var token: String
        var pushType: String
        var priority: Int
        var expiration: Timestamp?
        var collapseID: String?
        var apnsID: APNsID?
        var payload: String
    }

    /// The label of a push type APNs takes only with token authentication, from an app with a certificate.
    static let tokenAuthenticationRequired = "TokenAuthenticationRequired"

    let bundleID: String
    /// How the app authenticates: some push types are refused with a certificate.
    var authentication: AuthenticationMode = .token

    init(bundleID: String, authentication: AuthenticationMode = .token) {
        self.bundleID = bundleID
        self.authentication = authentication
    }

    init(app: PushdConfig.App) {
        if case .certificate = app.credentials {
            self.init(bundleID: app.bundleID, authentication: .certificate)
        } else {
            self.init(bundleID: app.bundleID, authentication: .token)
        }
    }

    func notification(_ fields: Fields) throws(Rejection) -> APNsNotification {
        let token: APNs.DeviceToken
        do {
            token = try APNs.DeviceToken(fields.token)
        } catch {
            throw Rejection(label: "BadDeviceToken", detail: "\(error)")
        }
        guard let pushType = PushType(rawValue: fields.pushType) else {
            throw Rejection(label: "InvalidPushType", detail: "'\(fields.pushType)' is not an APNs push type")
        }
        // Checked before anything is sent: APNs answers InvalidPushType (or worse, accepts and
        // drops) such a push over a certificate connection, and no retry changes that.
        if authentication == .certificate && !pushType.supportsCertificateAuthentication {
            throw Rejection(label: Self.tokenAuthenticationRequired, detail: "APNs accepts \(pushType.rawValue) pushes only with token (JWT) authentication, and this app uses a certificate")
        }
        guard let priority = Priority(rawValue: fields.priority) else {
            throw Rejection(label: "BadPriority", detail: "\(fields.priority) is not 10, 5 or 1")
        }
        let notification = APNsNotification(
            token: token,
            topic: topic(for: pushType),
            pushType: pushType,
            priority: priority,
            expiration: fields.expiration.map { Int64($0.timeIntervalSince1970.rounded(.down)) } ?? pushType.requiredExpiration,
            collapseID: fields.collapseID,
            apnsID: fields.apnsID,
            payload: Array(fields.payload.utf8))
        let issues = self.issues(in: notification)
        if !issues.isEmpty {
            throw Rejection(label: "Invalid", detail: issues.map(\.description).joined(separator: "; "))
        }
        return notification
    }

    /// The app's topic for a push type: the bundle id plus the type's suffix.
    func topic(for pushType: PushType) -> String {
        pushType.topic(forBundleID: bundleID) ?? bundleID
    }

    /// Every APNs rule `notification` breaks for this app, its authentication kind included.
    /// `pushd send` checks what it builds with this too, so it refuses what `run` refuses.
    func issues(in notification: APNsNotification) -> [ValidationIssue] {
        NotificationValidator.issues(in: notification, authentication: authentication)
    }
}
