// Reading Prometheus text (what /metrics answers) and estimating quantiles from histograms.

// Every sample: {name, labels: {..}, value}.
export function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = {};
    if (match[3]) {
      for (const pair of match[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[pair[1]] = pair[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      }
    }
    const value = match[4] === "+Inf" ? Infinity : Number(match[4]);
    samples.push({name: match[1], labels, value});
  }
  return samples;
}

export function total(samples, name, keep = () => true) {
  return samples.filter((s) => s.name === name && keep(s.labels)).reduce((sum, s) => sum + s.value, 0);
}

export function first(samples, name) {
  const found = samples.find((s) => s.name === name);
  return found ? found.value : undefined;
}

// A histogram's cumulative buckets summed over its other labels: [[le, count], ...], le ascending.
export function buckets(samples, name) {
  const byBound = new Map();
  for (const s of samples) {
    if (s.name !== `${name}_bucket`) continue;
    const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
    byBound.set(le, (byBound.get(le) || 0) + s.value);
  }
  return [...byBound.entries()].sort((a, b) => a[0] - b[0]);
}

// later − earlier, bucket by bucket (the observations between two scrapes).
export function bucketDelta(later, earlier) {
  const before = new Map(earlier);
  return later.map(([le, count]) => [le, count - (before.get(le) || 0)]);
}

// Prometheus' histogram_quantile: linear within the bucket that holds the rank.
export function quantile(q, cumulative) {
  if (!cumulative.length) return null;
  const count = cumulative[cumulative.length - 1][1];
  if (!(count > 0)) return null;
  const rank = q * count;
  let lower = 0, below = 0;
  for (const [le, cum] of cumulative) {
    if (cum >= rank) {
      if (le === Infinity) return lower;  // past the last finite bound: its bound is the best we know
      const inBucket = cum - below;
      return inBucket > 0 ? lower + (le - lower) * ((rank - below) / inBucket) : le;
    }
    lower = le;
    below = cum;
  }
  return lower;
}
