import Testing
@testable import pushd

/// While live instances disagree on an app's configured environment, only the work that
/// setting alone routes is held: a notification naming its environment, or to a token
/// registered with one, goes where it says.
@Suite struct EnvironmentDisagreementHoldDecisionTests {
    @Test func onlyWorkWithNeitherItsOwnNorARegisteredEnvironmentIsRoutedByTheConfiguredOne() {
        let values: [String?] = [nil, "production", "sandbox", "staging", ""]
        for job in values {
            for registered in values {
                let known = { (value: String?) in value == "production" || value == "sandbox" }
                #expect(AppSender.routedByConfiguredEnvironment(job: job, registered: registered) == (!known(job) && !known(registered)),
                        "job \(String(describing: job)), registered \(String(describing: registered))")
            }
        }
    }

    @Test func theHeldWorkShowsInPushdStatusAsAScopeOfItsApp() {
        let key = "shop " + PipelineContext.environmentHeldScope(.sandbox)
        let paused = FleetReport.PausedApp(key: key, reason: "why", instance: "host-a")
        #expect(paused.app == "shop")
        #expect(paused.scope == "notifications routed only by its configured environment (sandbox)")
    }
}
