//! Registering the gateway's series: each family goes into the gateway's own registry once, and its name is
//! kept as it goes (the registry lists only the families that have a series yet).

use prometheus::core::Collector;
use prometheus::{
    CounterVec, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// A registry being filled, with the name of every family registered in it.
#[derive(Default)]
pub(super) struct Registrar {
    pub(super) registry: Registry,
    pub(super) names: Vec<String>,
}

impl Registrar {
    fn add<C: Collector + Clone + 'static>(&mut self, family: C) -> Result<C, prometheus::Error> {
        self.names.extend(family.desc().iter().map(|d| d.fq_name.clone()));
        self.registry.register(Box::new(family.clone()))?;
        Ok(family)
    }

    /// Integer counters.
    pub(super) fn counters(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntCounterVec, prometheus::Error> {
        self.add(IntCounterVec::new(Opts::new(name, help), labels)?)
    }

    /// Counters of a quantity with a fraction (spend in the budget unit).
    pub(super) fn float_counters(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<CounterVec, prometheus::Error> {
        self.add(CounterVec::new(Opts::new(name, help), labels)?)
    }

    /// Histograms with `buckets`.
    pub(super) fn histograms(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
        buckets: &[f64],
    ) -> Result<HistogramVec, prometheus::Error> {
        self.add(HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels)?)
    }

    /// Gauges.
    pub(super) fn gauges(&mut self, name: &str, help: &str, labels: &[&str]) -> Result<GaugeVec, prometheus::Error> {
        self.add(GaugeVec::new(Opts::new(name, help), labels)?)
    }

    /// Integer gauges.
    pub(super) fn int_gauges(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntGaugeVec, prometheus::Error> {
        self.add(IntGaugeVec::new(Opts::new(name, help), labels)?)
    }

    /// One integer gauge.
    pub(super) fn int_gauge(&mut self, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
        self.add(IntGauge::new(name, help)?)
    }
}
