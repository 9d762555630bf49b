/*
 * The rows of a join of two tables, selected (`distributary/runner/tables.py`), on the JVM: per
 * output row's identity, the row it has, from weighted changes (a row added, or taken back when
 * the deletion flag is set) rather than records, so in any order, as weights add up. A batch's
 * changes of an identity are added to the row it had (weight 1); what is left with a positive
 * weight is its row. More than one such row, or a row twice, is a state that contradicts the
 * input: the view fails, naming the identity, rather than write a wrong row. A changed row is
 * written, or the old one flagged deleted when none is left.
 *
 * Compiled by `distributary.jvm_operators` against Spark's own jars (pyspark's), and by the job
 * image's build.
 */
package dev.distributary.tables;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

public final class NetRows extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;

    private final StructType state;
    private final int[] values;
    private final int delete;
    private final int match;
    private transient ValueState<Row> row;

    private NetRows(StructType input, StructType state, List<String> values, String delete,
                    String match) {
        this.state = state;
        this.values = values.stream().mapToInt(input::fieldIndex).toArray();
        this.delete = input.fieldIndex(delete);
        this.match = input.fieldIndex(match);
    }

    /**
     * The rows of `changes` keyed by column `key`: `state` the schema of an identity's row (the
     * `values` columns), `output` the schema written (the values and the deletion flag).
     */
    public static Dataset<Row> apply(Dataset<Row> changes, String key, List<String> values,
                                     String delete, String match, String state, String output,
                                     String mode) {
        NetRows processor = new NetRows(changes.schema(), (StructType) DataType.fromJson(state),
                values, delete, match);
        return Support.groupedBy(changes, List.of(key)).transformWithState(processor,
                TimeMode.None(), Support.mode(mode),
                Encoders.row((StructType) DataType.fromJson(output)));
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        row = getHandle().getValueState("row", Encoders.row(state), TTLConfig.NONE());
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(
            Row key, scala.collection.Iterator<Row> records, TimerValues timerValues) {
        Object[] old = row.exists() ? Support.values(row.get()) : null;
        Map<List<Object>, Long> counts = new LinkedHashMap<>();
        if (old != null) {
            counts.put(Arrays.asList(old), 1L);
        }
        CollectionConverters.asJava(records).forEachRemaining(record -> {
            if (Support.flag(record, match)) {
                long weight = Support.flag(record, delete) ? -1L : 1L;
                counts.merge(Arrays.asList(pick(record)), weight, Long::sum);
            }
        });
        List<Object[]> present = new ArrayList<>();
        long versions = 0;
        boolean twice = false;
        for (Map.Entry<List<Object>, Long> entry : counts.entrySet()) {
            if (entry.getValue() > 0) {
                present.add(entry.getKey().toArray());
                versions += entry.getValue();
                twice |= entry.getValue() > 1;
            }
        }
        if (present.size() > 1 || twice) {
            throw new IllegalStateException("the join's row '" + key.getString(0) + "' has "
                    + versions + " versions at once; the view's state is not what its input "
                    + "implies: rebuild the view");
        }
        Object[] now = present.isEmpty() ? null : present.get(0);
        List<Row> written = new ArrayList<>(1);
        if (Arrays.deepEquals(now, old)) {
            return CollectionConverters.asScala(written.iterator());
        }
        if (now == null) {
            row.clear();
            written.add(RowFactory.create(Support.concat(old, new Object[] {true})));
        } else {
            row.update(RowFactory.create(now));
            written.add(RowFactory.create(Support.concat(now, new Object[] {false})));
        }
        return CollectionConverters.asScala(written.iterator());
    }

    private Object[] pick(Row record) {
        Object[] picked = new Object[values.length];
        for (int i = 0; i < values.length; i++) {
            picked[i] = record.get(values[i]);
        }
        return picked;
    }
}
