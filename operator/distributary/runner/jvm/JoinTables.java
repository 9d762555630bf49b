/*
 * Two tables joined (`distributary/runner/joined_tables.py`), on the JVM: per join key, each
 * side's rows by record key, and the changes of the pairs they make. Input rows are weighted
 * changes of either side (a row added, +1, or taken back, -1). A batch's changes of a join key
 * are applied, the rows taken back before the rows added (a record key's old and new version come
 * in one batch, in no order), and the pairs they touch are compared before and after: a pair that
 * no longer holds is written taken back, a new or changed pair added. Changes of the second table
 * touch every row of the first under the key (and, for a LEFT JOIN, its row without a partner);
 * changes of the first only its own rows.
 *
 * A pair's identity: the first's record key and the second's, joined by a NUL; the first's alone
 * for a lookup, where a row of the first meets at most one row of the second, so that a row that
 * changes partner (or loses it, in a LEFT JOIN) keeps its identity and its output row is
 * replaced, not deleted and written again in no order.
 *
 * Compiled by `distributary.jvm_operators` against Spark's own jars (pyspark's), and by the job
 * image's build.
 */
package dev.distributary.tables;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

public final class JoinTables extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;

    private final boolean left;
    private final boolean lookup;
    private final StructType[] schemas;
    private final int side;
    private final int[] rowsOf;
    private final int weight;
    private transient MapState<Row, Row>[] sides;

    private JoinTables(StructType input, boolean left, boolean lookup, StructType[] schemas,
                       String side, List<String> rows, String weight) {
        this.left = left;
        this.lookup = lookup;
        this.schemas = schemas;
        this.side = input.fieldIndex(side);
        this.rowsOf = rows.stream().mapToInt(input::fieldIndex).toArray();
        this.weight = input.fieldIndex(weight);
    }

    /**
     * The join's rows from both sides' changes (`changes`: the join key's columns `keys`, the
     * side, 0 or 1, each side's row in the columns `rows` (its record key, then its columns),
     * null for the other side's, and the weight); `first` and `second` the sides' columns
     * (JSON), `output` the schema written: the identity, the taken-back flag, a partition and an
     * offset (0), the first's columns and the second's.
     */
    public static Dataset<Row> apply(Dataset<Row> changes, List<String> keys, boolean left,
                                     boolean lookup, String first, String second, String side,
                                     List<String> rows, String weight, String output) {
        StructType[] schemas = {(StructType) DataType.fromJson(first),
            (StructType) DataType.fromJson(second)};
        JoinTables processor = new JoinTables(changes.schema(), left, lookup, schemas, side, rows,
                weight);
        return Support.groupedBy(changes, keys).transformWithState(processor, TimeMode.None(),
                OutputMode.Append(), Encoders.row((StructType) DataType.fromJson(output)));
    }

    @Override
    @SuppressWarnings({"unchecked", "rawtypes"})
    public void init(OutputMode outputMode, TimeMode timeMode) {
        sides = new MapState[2];
        for (int n = 0; n < 2; n++) {
            sides[n] = getHandle().getMapState("side" + n, Encoders.row(JoinRows.RECORD_KEY),
                    Encoders.row(schemas[n]), TTLConfig.NONE());
        }
    }

    /** A change of one side: its record key, its row's values, its weight. */
    private record Change(String key, Object[] values, long weight) {
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(
            Row key, scala.collection.Iterator<Row> records, TimerValues timerValues) {
        boolean keyed = Support.keyed(key);
        List<List<Change>> changes = List.of(new ArrayList<>(), new ArrayList<>());
        CollectionConverters.asJava(records).forEachRemaining(record -> {
            int number = record.getInt(side);
            Row row = record.getStruct(rowsOf[number]);
            Object[] values = Arrays.copyOfRange(Support.values(row), 1, row.length());
            changes.get(number).add(new Change(row.getString(0), values, record.getLong(weight)));
        });
        Set<String> touched = new HashSet<>();
        changes.get(0).forEach(c -> touched.add(c.key()));
        if (!changes.get(1).isEmpty()) {
            touched.addAll(rows(0).keySet());
        }
        Map<String, Object[]> firstBefore = some(0, touched);
        Map<String, Object[]> secondBefore = rows(1);
        for (int n = 0; n < 2; n++) {
            apply(n, changes.get(n));
        }
        Map<String, Object[]> firstAfter = some(0, touched);
        Map<String, Object[]> secondAfter = changes.get(1).isEmpty() ? secondBefore : rows(1);
        int width = schemas[1].length();
        Map<String, Object[]> old = pairs(firstBefore, secondBefore, keyed, width);
        Map<String, Object[]> now = pairs(firstAfter, secondAfter, keyed, width);
        List<Row> written = new ArrayList<>();
        old.forEach((identity, values) -> {
            if (!Arrays.deepEquals(now.get(identity), values)) {
                written.add(row(identity, true, values));
            }
        });
        now.forEach((identity, values) -> {
            if (!Arrays.deepEquals(old.get(identity), values)) {
                written.add(row(identity, false, values));
            }
        });
        return CollectionConverters.asScala(written.iterator());
    }

    private Map<String, Object[]> rows(int number) {
        Map<String, Object[]> found = new LinkedHashMap<>();
        CollectionConverters.asJava(sides[number].iterator()).forEachRemaining(
                entry -> found.put(entry._1().getString(0), Support.values(entry._2())));
        return found;
    }

    private Map<String, Object[]> some(int number, Set<String> keys) {
        Map<String, Object[]> found = new LinkedHashMap<>();
        for (String key : keys) {
            Row record = RowFactory.create(key);
            if (sides[number].containsKey(record)) {
                found.put(key, Support.values(sides[number].getValue(record)));
            }
        }
        return found;
    }

    private void apply(int number, List<Change> changes) {
        MapState<Row, Row> state = sides[number];
        for (Change change : changes) {
            Row record = RowFactory.create(change.key());
            if (change.weight() < 0 && state.containsKey(record)) {
                state.removeKey(record);
            }
        }
        for (Change change : changes) {
            if (change.weight() > 0) {
                state.updateValue(RowFactory.create(change.key()),
                        RowFactory.create(change.values()));
            }
        }
    }

    private Map<String, Object[]> pairs(Map<String, Object[]> first, Map<String, Object[]> second,
                                        boolean keyed, int width) {
        Map<String, Object[]> found = new LinkedHashMap<>();
        first.forEach((firstKey, firstValues) -> {
            boolean partnered = false;
            if (keyed) {
                for (Map.Entry<String, Object[]> partner : second.entrySet()) {
                    String identity = lookup ? firstKey : firstKey + "\u0000" + partner.getKey();
                    found.put(identity, Support.concat(firstValues, partner.getValue()));
                    partnered = true;
                }
            }
            if (left && !partnered) {
                String identity = lookup ? firstKey : firstKey + "\u0000";
                found.put(identity, Support.concat(firstValues, new Object[width]));
            }
        });
        return found;
    }

    private static Row row(String identity, boolean takenBack, Object[] values) {
        return RowFactory.create(Support.concat(new Object[] {identity, takenBack, 0, 0L},
                values));
    }
}
